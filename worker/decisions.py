"""The one decision path. Every source of decisions (the API, the web inbox, the inbox CLI, a
signed webhook, the sweep polling an inbox, and any channel added later) turns its input into a
:class:`Decision` and calls :meth:`Decisions.decide`, which alone applies the rules fixed on the
run when it paused: the deadline, the request named (interrupt id and digest), valid decisions
(schema, allowed types, locked arguments, the workflow's check of edits), separation of duties
and the quorum, counted per person in the one approvals table. It answers :class:`Applied` (the
claimed run, to resume), :class:`Pending` (approvals so far) or :class:`Refused` (a reason from
one enum). A refusal changes no table: it is logged, and the source says it in its own way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.errors import UserError, scrub
from core.limits import check_name
from inbox.duties import SelfApproval, check_duties, distinct, normalize
from inbox.hitl import Decisions as Typed
from inbox.hitl import HitlRequest, validate_decisions
from ops import metrics
from store.approvals import Approval, RunApprovals
from store.runs import RunStore, new_owner
from store.states import Run, Status
from worker.graphs import Graphs
from worker.refusals import Refusal, Refused, unknown_run

log = logging.getLogger(__name__)


class Source(StrEnum):
    """Where a decision came from; recorded with its approvals and its claim."""

    API = "api"
    PAGE = "page"
    CLI = "inbox"
    WEBHOOK = "webhook"
    SWEEP = "sweep"

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Source.API: "the API",
    Source.PAGE: "the web inbox",
    Source.CLI: "the inbox command line",
    Source.WEBHOOK: "a signed webhook",
    Source.SWEEP: "the inbox, by polling",
}


@dataclass(frozen=True)
class Decision:
    """Who decided which request, and how: one decision per proposed action, in order.

    ``digest`` is what the reviewer saw (``GET /runs/{id}``'s ``approval.digest``); a source
    that shows no request of its own (a webhook, a poll, the CLI reading the request by its id)
    leaves it None and the interrupt id alone names the request."""

    thread_id: str
    interrupt_id: str
    decisions: list[dict[str, Any]]  # as the source received them; the path types them
    approvers: list[str]
    source: Source
    digest: str | None = None

    def resume_value(self) -> dict[str, Any]:
        """What ``Command(resume=...)`` gets, in the HITL middleware's shape."""
        return {"decisions": self.decisions}


@dataclass(frozen=True)
class Applied:
    """The decision claimed the run, which is now ``resuming``: the source resumes it (or hands
    it off, for the next sweep or delivery to take up)."""

    run: Run
    approvers: list[str] = field(default_factory=list)  # everyone whose approval it took


@dataclass(frozen=True)
class Pending:
    """An approval counted toward a quorum that is not met yet; the run still waits."""

    approvers: list[str] = field(default_factory=list)
    quorum: int = 1


Result = Applied | Pending | Refused


def _stamp(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at or 0))


class Decisions:
    def __init__(
        self, runs: RunStore, approvals: RunApprovals, graphs: Graphs, clock: Callable[[], float]
    ):
        self.runs = runs
        self.approvals = approvals
        self.graphs = graphs
        self.clock = clock

    def decide(self, decision: Decision, *, handoff: bool = False) -> Result:
        """Judge ``decision`` by the run's stored rules and apply it if it may be applied.

        ``handoff``: the source does not resume the run itself (the inbox CLI); the claim is
        left for the next sweep or signed delivery to take up (``RunStore.claim``)."""
        result = self._decide(decision, handoff)
        metrics.count_claim(result)
        if isinstance(result, Refused):
            log.info(
                "decision on %s through %s by %s refused (%s): %s",
                decision.thread_id,
                decision.source,
                ", ".join(decision.approvers) or "nobody named",
                result.reason,
                scrub(result.message),
            )
        return result

    def _decide(self, d: Decision, handoff: bool) -> Result:
        run = self.runs.get(d.thread_id)
        refused = self._still_waiting(run, d)
        if refused is not None:
            return refused
        assert run is not None and run.request is not None  # a waiting run has its request
        if d.digest is not None and d.digest != run.request_digest:
            return Refused(
                Refusal.STALE,
                "the request changed since it was read (or the digest is wrong): read the run "
                "again and decide on what it proposes now",
            )
        request = HitlRequest.parse(run.request)
        try:
            schemas = self.graphs.args_schemas(run.workflow)
            typed = validate_decisions(request, d.resume_value(), schemas)
            self._check_edits(run.workflow, request, typed)
            for name in d.approvers:  # one person each, told apart by visible characters
                check_name(name, "an approver's name")
        except UserError as exc:
            return Refused(Refusal.INVALID, f"invalid decision: {exc}")
        approvers = distinct(d.approvers)
        if typed.approving:
            try:
                check_duties(approvers, run.requested_by, run.separation, f"run {run.thread_id}")
            except SelfApproval as exc:
                return Refused(Refusal.DUTIES, str(exc))
            needed = max(run.quorum or 1, self._quorum(run.workflow, request.edited(typed)))
            so_far = self.approvals.list(run.thread_id, d.interrupt_id)
            for other in so_far:
                if other.decisions != typed.to_json():
                    return Refused(
                        Refusal.DISAGREE,
                        f"{other.reviewer} approved other decisions; approvers of a quorum "
                        "must agree (or one of you rejects)",
                    )
            if needed > 1:
                counted = self._count(run, d, typed.to_json(), approvers, needed, so_far)
                if not isinstance(counted, list):
                    return counted
                approvers = counted
        claimed = self.runs.claim(
            run.thread_id,
            d.interrupt_id,
            typed.resume_value(),
            new_owner(str(d.source)),
            decided=typed.to_json(),
            approvers=approvers,
            source=str(d.source),
            handoff=handoff,
        )
        if claimed is None:  # someone else's claim, or the deadline, came first
            current = self.runs.get(d.thread_id)
            lost = self._still_waiting(current, d)
            return lost or Refused(Refusal.DECIDED, "another decision was applied first")
        return Applied(claimed, approvers)

    def _still_waiting(self, run: Run | None, d: Decision) -> Refused | None:
        """Why the run does not wait for this decision (None if it does)."""
        if run is None:
            return unknown_run(d.thread_id)
        named = f"request {d.interrupt_id}"
        if run.status == Status.WAITING:
            if run.interrupt_id != d.interrupt_id:
                return Refused(Refusal.OTHER_INTERRUPT, "run is waiting on a different interrupt")
            if run.expires_at is not None and run.expires_at <= self.clock():
                return self._expired(named, run)
            return None
        if run.interrupt_id == d.interrupt_id:
            if run.status == Status.EXPIRED:
                return self._expired(named, run)
            if run.status == Status.CANCELLED:
                return Refused(Refusal.NOT_WAITING, f"{named} was cancelled; it cannot be decided")
            claim = self.runs.last_claim(run.thread_id)
            detail = (claim or {}).get("detail") or {}
            if claim is not None and detail.get("interrupt_id") == d.interrupt_id:
                return Refused(Refusal.DECIDED, _decided(named, claim, detail))
        return Refused(Refusal.NOT_WAITING, f"run is {run.status}, not waiting")

    def _expired(self, named: str, run: Run) -> Refused:
        return Refused(
            Refusal.EXPIRED,
            f"{named} expired at {_stamp(run.expires_at)}; a decision is no longer accepted "
            "(start a new run if the action is still wanted)",
        )

    def _check_edits(self, workflow: str, request: HitlRequest, decisions: Typed) -> None:
        """The workflow's own judgement of edited arguments (what is still refundable, the
        budget left), if it offers one: ``check_edit(tool, args)`` raising ``UserError``."""
        check = getattr(self.graphs.workflow(workflow), "check_edit", None)
        if check is None:
            return
        edited = request.edited(decisions)
        for before, after in zip(request.actions, edited.actions, strict=True):
            if before.args != after.args:
                check(after.name, after.args)

    def _quorum(self, workflow: str, edited: HitlRequest) -> int:
        """Distinct approvers the request as it will run needs: an edit may raise an amount
        past the quorum amount (the policy judged again)."""
        return self.graphs.workflow(workflow).quorum(edited)

    def _count(
        self,
        run: Run,
        d: Decision,
        decisions: list[dict[str, Any]],
        approvers: list[str],
        needed: int,
        so_far: list[Approval],
    ) -> list[str] | Pending | Refused:
        """Count these approvers toward the quorum (``so_far`` agree with them): everyone when
        it is met, else the approvals so far (or why they cannot count)."""
        known = {a.key for a in so_far}
        new = {normalize(n): n for n in approvers if normalize(n) not in known}
        if not new:
            named = {normalize(n) for n in approvers}
            already = [a.reviewer for a in so_far if a.key in named] or ["nobody named"]
            return Refused(
                Refusal.REPEATED,
                f"{', '.join(already)} already approved; {needed} distinct approvers must",
            )
        rows = self.approvals.add(
            run.thread_id, d.interrupt_id, new, decisions, source=str(d.source), quorum=needed
        )
        everyone = distinct(a.reviewer for a in rows)
        if len(everyone) < needed:
            return Pending(everyone, needed)
        return everyone


def _decided(named: str, claim: dict[str, Any], detail: dict[str, Any]) -> str:
    source = str(detail.get("source"))
    through = f"through {Source(source).label}, " if source in Source._value2member_map_ else ""
    who = ", ".join(detail.get("approvers") or []) or "another reviewer"
    return (
        f"{named} was already decided ({through}by {who} at {_stamp(claim['at'])}); "
        "a decision cannot be changed"
    )
