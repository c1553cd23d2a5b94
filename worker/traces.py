"""What a run's trace says: the spans of its life and the approval attributes of this product's
convention (docs/how-to/tracing.md), named after OpenTelemetry's open proposals until it
publishes one. Every hook here costs nothing while tracing is off (``core.tracing``).

The span that starts a run is the run's root (a child of the request that started it, if that
request carried a ``traceparent``); its context is stored with the run, and every later span
(segment, decision attempt, wait, claim, resume) names it as parent, in whichever process, so a
run is one trace however many processes and hours it takes. A span that begins in a request of
another trace (a Slack press, an e-mail link) links to that request's span instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from core import tracing
from core.identity import Provenance, identity_key
from store.runs import AfterCommit
from store.states import Run, Status
from store.traces import TraceRows
from worker.ballot import Applied, Decision, Pending, Source
from worker.refusals import Refused

if TYPE_CHECKING:
    from worker.decisions import Decisions

RUN = "approval_worker.thread_id"

# Sources as an operator names them (the enum's values are the audit trail's, kept as they are)
SOURCE_NAMES = {Source.CLI: "cli", Source.LANGGRAPH: "langgraph", Source.SWEEP: "poll"}

# The credential a source's principals come through, where the source says it alone (the API
# and LangGraph clients come with a key or a JWT: the decision names which)
PROVENANCE = {
    Source.PAGE: Provenance.SESSION,
    Source.CLI: Provenance.CLI,
    Source.WEBHOOK: Provenance.INBOX_WEBHOOK,
    Source.SWEEP: Provenance.INBOX_POLL,
    Source.SLACK: Provenance.SLACK,
    Source.EMAIL: Provenance.EMAIL_LINK,
}


def approver_id(name: str) -> str:
    """A principal's stable id as traces show it: the identity as compared (NFKC, case folded),
    or, when it reads as an e-mail address, a digest of it (an address is personal data that
    a trace backend keeps longer than anyone reads it)."""
    key = identity_key(name)
    if "@" in key:
        return "sha256:" + hashlib.sha256(key.encode()).hexdigest()[:16]
    return key


def status_of(decisions: Any) -> str:
    """``approval.status`` of an applied answer: rejected if any action is, else edited if any
    is, else approved (``responded`` when every answer is a reply)."""
    types = {d.get("type") for d in (decisions or {}).get("decisions", []) if isinstance(d, dict)}
    for kind, status in (("reject", "rejected"), ("edit", "edited"), ("approve", "approved")):
        if kind in types:
            return status
    return "responded" if types else "approved"


def _parent(rows: TraceRows, thread_id: str) -> str | None:
    """The run's stored context, unless the current span is already in the run's trace."""
    run = rows.traceparent_of(thread_id)
    return None if tracing.same_trace(run, tracing.current()) else run


@contextmanager
def starting(workflow: str) -> Iterator[None]:
    """Around a start: the span every later span of the run hangs under."""
    with tracing.span("approval_worker.start", attributes={"approval_worker.workflow": workflow}):
        yield


def begun(rows: TraceRows, thread_id: str) -> None:
    """The run exists: store the current context with it (the start span's)."""
    if not tracing.enabled():
        return
    here = tracing.current()
    if here is not None:
        rows.save(thread_id, here)
        from opentelemetry import trace

        trace.get_current_span().set_attribute(RUN, thread_id)


@contextmanager
def segment(rows: TraceRows, thread_id: str, from_status: Status) -> Iterator[None]:
    if not tracing.enabled():
        yield
        return
    attributes = {RUN: thread_id, "approval_worker.from_status": str(from_status)}
    parent = _parent(rows, thread_id)
    with tracing.span("approval_worker.segment", parent=parent, attributes=attributes):
        yield


@contextmanager
def resuming(rows: TraceRows, thread_id: str, owner: str) -> Iterator[None]:
    """Around a resume, in whichever process took the claim; links the request it runs in."""
    if not tracing.enabled():
        yield
        return
    here = tracing.current()
    parent = _parent(rows, thread_id)
    attributes = {RUN: thread_id, "approval_worker.owner": owner.split("@")[0]}
    links = [here] if parent and here else []
    with tracing.span("approval_worker.resume", parent=parent, links=links, attributes=attributes):
        yield


def _decision_attributes(d: Decision) -> dict[str, Any]:
    return {
        RUN: d.thread_id,
        "approval.source": SOURCE_NAMES.get(d.source, str(d.source)),
        "approval.approver_id": [approver_id(n) for n in d.approvers],
        "approval.provenance": d.provenance or PROVENANCE.get(d.source),
        "approval.interrupt_id": d.interrupt_id,
        "approval.request_digest": d.digest,
        "approval.on_behalf_of": approver_id(d.on_behalf_of) if d.on_behalf_of else None,
    }


@contextmanager
def attempt(decisions: Decisions, d: Decision) -> Iterator[Callable[[Any], None]]:
    """Around one decision attempt: yields what to call with its result (refused with the
    reason, pending with the count, or applied: then the wait and the claim are recorded)."""
    if not tracing.enabled():
        yield lambda result: None
        return
    rows = decisions.runs.tables.traces()
    here = tracing.current()
    parent = _parent(rows, d.thread_id)
    links = [here] if parent and here else []
    attributes = _decision_attributes(d)
    with tracing.span("approval.decide", parent=parent, links=links, attributes=attributes) as s:
        yield lambda result: _judged(decisions, s, result)


def _judged(decisions: Decisions, span: Any, result: Any) -> None:
    if isinstance(result, Refused):
        span.set_attribute("approval.outcome", "refused")
        span.set_attribute("approval.refusal.reason", result.reason.name.lower())
    elif isinstance(result, Pending):
        span.set_attributes(
            tracing.clean(
                {
                    "approval.outcome": "pending",
                    "approval.quorum": result.quorum,
                    "approval.quorum.approvals": len(result.approvers),
                    "approval.answered": result.answered or None,
                }
            )
        )
    elif isinstance(result, Applied):
        run = result.run
        span.set_attribute("approval.outcome", "applied")
        span.set_attribute("approval.status", status_of(run.decision))
        owner = (run.owner or "").split("@")[0]
        claim = {RUN: run.thread_id, "approval_worker.owner": owner}
        tracing.record("approval.claim", parent=None, start=run.updated_at, end=run.updated_at,
                       attributes=claim)  # fmt: skip
        approval = {**_approval(decisions, run), "approval.status": status_of(run.decision)}
        approval["approval.approver_id"] = [approver_id(n) for n in result.approvers]
        span.set_attributes(tracing.clean(approval))
        waited(
            decisions.runs.tables.traces(),
            run,
            decisions.clock(),
            {**approval, **_money(decisions, run)},
        )


def _approval(decisions: Decisions, run: Run) -> dict[str, Any]:
    """What the pause's spans say of the request: digest, band, quorum."""
    out: dict[str, Any] = {
        RUN: run.thread_id,
        "approval.interrupt_id": run.interrupt_id,
        "approval.request_digest": run.request_digest,
        "approval.quorum": run.quorum or 1,
        "approval.workflow": run.workflow,
    }
    try:
        out["approval.authority_band"] = decisions.needs(run)
    except Exception:  # noqa: BLE001 - a trace never fails a decision
        pass
    return out


def _money(decisions: Decisions, run: Run) -> dict[str, Any]:
    """The amount and currency the workflow's own summary hook reads off the request (its
    ``describe``, as the page shows it): on the event that the run paused, and on the pause's
    span once it ends (there, one read of the books per decided run, only while tracing)."""
    try:
        views = decisions.graphs.views(run.workflow, run.asked)
    except Exception:  # noqa: BLE001 - a trace never fails a pause
        return {}
    currencies = {v.currency for v in views if v.amount is not None}
    if len(currencies) != 1:
        return {}
    amount = sum((v.amount or Decimal(0)) for v in views)
    return {"approval.amount": amount, "approval.currency": currencies.pop()}


def waited(rows: TraceRows, run: Run, now: float, approval: dict[str, Any]) -> None:
    """The wait from the pause to ``now`` (its decision, expiry or cancel), recorded after the
    fact as a child of the run's root span."""
    since = rows.paused_at(run.thread_id)
    if since is None:
        return
    approval = {**approval, "approval.wait_seconds": round(max(0.0, now - since), 3)}
    parent = rows.traceparent_of(run.thread_id)
    tracing.record("approval.pause", parent=parent, start=since, end=now, attributes=approval)


def noting(
    after: AfterCommit, decisions: Callable[[], Decisions], clock: Callable[[], float]
) -> AfterCommit:
    """``after`` (the notifier's), then the transition as an event on the current span; a
    wait that ends without a decision (expired, cancelled) is recorded with its status."""

    def committed(run: Run, reason: str) -> None:
        after(run, reason)
        if not tracing.enabled():
            return
        from opentelemetry import trace

        event = {"approval_worker.to_status": str(run.status), "approval_worker.reason": reason}
        here = trace.get_current_span()
        here.add_event("transition", event)
        if run.status == Status.WAITING and here.is_recording():
            requested = {**_approval(decisions(), run), **_money(decisions(), run)}
            here.add_event("approval.requested", tracing.clean(requested))
        ended = run.status == Status.EXPIRED or (
            run.status == Status.CANCELLED and run.request is not None and run.decision is None
        )
        if ended:
            approval = {**_approval(decisions(), run), **_money(decisions(), run)}
            approval["approval.status"] = str(run.status)
            waited(decisions().runs.tables.traces(), run, clock(), approval)

    return committed
