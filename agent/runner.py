"""The segment runner: run a thread until it finishes or pauses, record the outcome, return.

Nothing waits in memory. A segment starts from whatever the checkpointer holds for the thread and
ends in exactly one recorded state: ``waiting`` (approval opened in the inbox), ``done`` or
``failed``. Resuming is a separate, claimed step, so any process (webhook, sweeper, CLI) can do it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command, Interrupt

from agent.policy import (
    expires_in_setting,
    ladder_points,
    parse_duration,
    separation_of_duties,
)
from agent.workflows import get_workflow
from inbox import external_id, open_inbox
from inbox.base import Inbox
from inbox.hitl import DECISION_TYPES, summary, validate_decisions
from inbox.outbox import Outbox
from store.db import Store, open_store
from store.errors import UserError, one_line
from store.faults import fault
from store.ledger import Ledger
from store.receipts import Receipts
from store.runs import (
    ACTIVE,
    CANCELLED,
    DONE,
    EXPIRED,
    FAILED,
    RESUMING,
    RUNNING,
    WAITING,
    Run,
    RunStore,
    lease_seconds,
    new_owner,
)

TITLE_MAX, DESCRIPTION_MAX = 100, 2000
INTERRUPTED = "interrupted"  # an outcome, not a row status: the row keeps its lease
REMINDED, ESCALATED = "reminder", "escalated"  # outcomes of the ladder; the run keeps waiting
REFUSED_EXPIRED = "expired"  # Runner.claim's reason when the deadline has passed
log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """How a segment (or an attempt to start one) ended, for printing and for the API."""

    thread_id: str
    status: str
    interrupt_id: str | None = None
    result: str | None = None
    error: str | None = None
    started: bool = True

    def line(self) -> str:
        """One line, always: scripts read run.py's stdout line by line, and a model's answer
        may span paragraphs (the full text stays in the run's ``result``)."""
        if self.status == WAITING:
            text = f"paused on interrupt {self.interrupt_id} - state saved, exiting"
        elif self.status in (DONE, EXPIRED, CANCELLED):
            text = " ".join((self.result or "").split())
        elif self.status == FAILED:
            text = f"failed: {self.error}"
        elif self.status in (REMINDED, ESCALATED):
            text = self.result or self.status
        elif self.status == INTERRUPTED:
            text = f"interrupted ({self.error}); recovery takes it over when its lease ends"
        else:
            text = self.status
        if not self.started:
            return f"run {self.thread_id} already exists ({self.status}): {text}"
        return text


def outcome_of(run: Run, *, started: bool = False) -> Outcome:
    return Outcome(run.thread_id, run.status, run.interrupt_id, run.result, run.error, started)


def final_answer(values: dict) -> str:
    for message in reversed(values.get("messages", [])):
        if isinstance(message, AIMessage):
            return _text(message.content)
    return ""


def is_per_call(item: Interrupt) -> bool:
    """``HumanInTheLoopMiddleware(interrupt_mode="per_call")``: one interrupt per gated call."""
    return isinstance(item.value, dict) and item.value.get("type") == "tool_approval"


def allowed_from_schema(schema: Any) -> list[str]:
    """The decision types a per-call interrupt's ``response_schema`` accepts (all if unknown)."""
    if not isinstance(schema, dict):
        return list(DECISION_TYPES)
    defs = schema.get("$defs", {})

    def resolve(node: dict) -> dict:
        ref = node.get("$ref", "")
        return defs.get(ref.rsplit("/", 1)[-1], {}) if ref.startswith("#/$defs/") else node

    kinds = []
    for branch in schema.get("oneOf") or schema.get("anyOf") or [schema]:
        kind = resolve(branch).get("properties", {}).get("type", {}).get("const")
        if kind in DECISION_TYPES:
            kinds.append(kind)
    return kinds or list(DECISION_TYPES)


def _call_order(messages: list) -> dict[str, int]:
    order: dict[str, int] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            for tc in message.tool_calls:
                order.setdefault(tc["id"], len(order))
    return order


def _split(interrupts: tuple[Interrupt, ...]) -> tuple[list[Interrupt], list[Interrupt]]:
    batched = sorted((i for i in interrupts if not is_per_call(i)), key=lambda i: i.id)
    return batched, [i for i in interrupts if is_per_call(i)]


def combined_request(interrupts: tuple[Interrupt, ...], messages: list | None = None) -> dict:
    """One HITL request for every interrupt pending on the thread.

    Batched interrupts (ours, or the middleware's default mode) contribute their action requests
    in interrupt-id order; per-call interrupts follow, one action each in the order the model
    made the calls, carrying ``tool_call_id`` so the decision finds its interrupt again.
    """
    batched, per_call = _split(interrupts)
    order = _call_order(messages or [])
    per_call.sort(key=lambda i: (order.get(i.value["tool_call_id"], len(order)), i.id))
    actions: list[dict] = []
    configs: dict[str, dict] = {}
    for item in batched:
        actions.extend(item.value["action_requests"])
        for config in item.value.get("review_configs", []):
            configs.setdefault(config["action_name"], config)
    for item in per_call:
        value = item.value
        actions.append(
            {
                "name": value["name"],
                "args": value["args"],
                "description": value.get("description", ""),
                "tool_call_id": value["tool_call_id"],
            }
        )
        configs.setdefault(
            value["name"],
            {
                "action_name": value["name"],
                "allowed_decisions": allowed_from_schema(item.response_schema),
            },
        )
    return {"action_requests": actions, "review_configs": list(configs.values())}


def resume_command(
    interrupts: tuple[Interrupt, ...], decision: dict, request: dict | None = None
) -> Command:
    """The resume for the pending interrupts, from decisions in ``combined_request`` order.

    One batched interrupt gets the plain ``{"decisions": [...]}``; otherwise an id map: each
    batched interrupt its slice, each per-call interrupt the single decision whose action has
    its ``tool_call_id`` (checked against the interrupt's ``response_schema`` first, since
    LangGraph would raise mid-resume after sibling tools may already have run).
    """
    decisions = decision["decisions"]
    if len(interrupts) == 1 and not is_per_call(interrupts[0]):
        return Command(resume=decision)
    batched, per_call = _split(interrupts)
    actions = (request or {}).get("action_requests", [])
    by_call = {a["tool_call_id"]: i for i, a in enumerate(actions) if "tool_call_id" in a}
    by_id: dict[str, Any] = {}
    start = 0
    for item in batched:
        count = len(item.value["action_requests"])
        by_id[item.id] = {"decisions": decisions[start : start + count]}
        start += count
    for item in per_call:
        index = by_call.get(item.value["tool_call_id"])
        if index is None:
            raise UserError(f"no decision for the call {item.value['tool_call_id']}")
        _check_schema(decisions[index], item.response_schema, item.value["name"])
        by_id[item.id] = decisions[index]
    return Command(resume=by_id)


def _check_schema(decision: Any, schema: Any, name: str) -> None:
    if not isinstance(schema, dict):
        return
    import jsonschema

    try:
        jsonschema.validate(decision, schema)
    except jsonschema.ValidationError as exc:
        raise UserError(f"decision for {name} does not fit its interrupt: {exc.message}") from None


def transcript(messages: list, limit: int = 50, text_limit: int = 2000) -> list[dict]:
    """The conversation so far as plain JSON for reviewers: who said what, which tools ran."""
    out: list[dict] = []
    for m in messages[-limit:]:
        text = _truncate(_text(m.content), text_limit)
        if isinstance(m, HumanMessage):
            out.append({"role": "user", "text": text})
        elif isinstance(m, AIMessage):
            entry: dict[str, Any] = {"role": "assistant", "text": text}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {"id": tc["id"], "name": tc["name"], "args": tc["args"]} for tc in m.tool_calls
                ]
            out.append(entry)
        elif isinstance(m, ToolMessage):
            out.append(
                {
                    "role": "tool",
                    "name": m.name,
                    "tool_call_id": m.tool_call_id,
                    "status": m.status,
                    "text": text,
                }
            )
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str | dict)
    )


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class NotCancellable(UserError):
    """The run already ended (done, expired, cancelled): there is nothing left to stop."""


class Runner:
    """Starts, claims and resumes runs against one store and one inbox."""

    def __init__(self, store: Store, inbox: Inbox | None = None, clock=time.time):
        self.store = store
        self.clock = clock
        self.runs = RunStore(store.db, clock)
        if inbox is None:
            inbox = open_inbox(store.db)
            if hasattr(inbox, "clock"):
                inbox.clock = clock  # one notion of "now" for deadlines, in tests too
        self.inbox = inbox
        self.ledger = Ledger(store.db)
        self.receipts = Receipts(store.db)
        self._graphs: dict[str, Any] = {}
        self._schemas: dict[str, dict] = {}

    def graph(self, workflow: str):
        """The workflow's compiled graph (built once per runner)."""
        if workflow not in self._graphs:
            self._graphs[workflow] = get_workflow(workflow).build(
                self.store.checkpointer, self.ledger, self.receipts
            )
        return self._graphs[workflow]

    def args_schemas(self, workflow: str) -> dict[str, dict]:
        """Tool argument schemas that reviewers' edits must satisfy."""
        if workflow not in self._schemas:
            graph = self.graph(workflow)
            self._schemas[workflow] = get_workflow(workflow).args_schemas(graph)
        return self._schemas[workflow]

    @staticmethod
    def _quorum(workflow: str, request: dict) -> int:
        """Distinct approvers the proposed actions need (the policy's, 1 for other graphs)."""
        policy = getattr(get_workflow(workflow), "policy", None)
        if policy is None:
            return 1
        actions = request["action_requests"]
        return max([policy.quorum(a["name"], a.get("args") or {}) for a in actions] or [1])

    def _window(self, workflow: str) -> float:
        """The workflow's approval window; a custom Workflow without one gets the global one."""
        expires_in = getattr(get_workflow(workflow), "expires_in", None)
        return expires_in() if expires_in is not None else expires_in_setting(None)

    # -- starting ---------------------------------------------------------------------------

    def start(
        self,
        text: str,
        *,
        thread_id: str,
        workflow: str = "refund",
        on_start: Callable[[str], None] | None = None,
        expires_in: str | float | None = None,
        requested_by: str | None = None,
    ) -> Outcome:
        """Start a run once per thread id; an existing id reports that run instead.

        ``on_start`` gets the model's name once the run exists and its segment begins (so a
        refused start says nothing but the error). ``expires_in`` (``2h``, seconds) overrides
        the workflow's approval window for this run."""
        if not text.strip():
            raise UserError("the request text is empty; say what the agent should do")
        window = None if expires_in is None else parse_duration(expires_in, "expires_in")
        self.graph(workflow)  # an unknown or broken workflow is refused before a run exists
        owner = new_owner("run")
        created = self.runs.create(
            thread_id,
            workflow,
            {"text": text},
            owner,
            expires_in=window,
            requested_by=requested_by,
        )
        if not created:
            return outcome_of(self.runs.get(thread_id))
        if on_start is not None:
            on_start(get_workflow(workflow).model_name())
        return self.run_segment(
            thread_id, workflow, {"messages": [HumanMessage(text)]}, owner, RUNNING
        )

    # -- claiming and resuming --------------------------------------------------------------

    def claim(
        self,
        thread_id: str,
        interrupt_id: str,
        decision: Any,
        owner: str,
        *,
        decided_by: str | None = None,
        approvers: list[str] | None = None,
    ) -> str | None:
        """Take a waiting run for ``owner``. None if claimed, else why not (caller does nothing).

        The deadline is enforced by the claiming UPDATE itself, so a decision racing it either
        claims or is refused (``REFUSED_EXPIRED``, recorded as an event), never both; the
        checks before it only give a better reason."""
        run = self.runs.get(thread_id)
        if run is None:
            return "unknown thread"
        if run.status == EXPIRED:
            self._late(thread_id, interrupt_id, owner, decided_by)
            return REFUSED_EXPIRED
        if run.status != WAITING:
            return f"run is {run.status}, not waiting"
        if run.interrupt_id != interrupt_id:
            return "run is waiting on a different interrupt"
        try:
            validate_decisions(run.request, decision, self.args_schemas(run.workflow))
            self._check_duties(run, decision, decided_by, approvers)
        except UserError as exc:
            detail = {"error": str(exc), "decided_by": decided_by}
            self.runs.record(thread_id, owner, "decision refused", detail)
            return f"invalid decision: {exc}"
        if not self.runs.claim(thread_id, interrupt_id, decision, owner, decided_by=decided_by):
            if _past_deadline(self.runs.get(thread_id), self.clock()):
                self._late(thread_id, interrupt_id, owner, decided_by)
                return REFUSED_EXPIRED
            return "already claimed"
        return None

    @staticmethod
    def _check_duties(run: Run, decision: Any, decided_by, approvers) -> None:
        """Separation of duties and quorum, whatever the decision's source: the requester may
        not approve (``SEPARATION_OF_DUTIES``), and an approval that needs N approvers must name
        N distinct ones. A reject needs one reviewer. ``requested_by`` and ``quorum`` never
        change while the run waits, so checking before the claiming UPDATE leaves no gap."""
        kinds = {d.get("type") for d in decision.get("decisions", [])}
        if not kinds & {"approve", "edit"}:
            return
        names = {n for n in (approvers or ([decided_by] if decided_by else [])) if n}
        if separation_of_duties() and run.requested_by and run.requested_by in names:
            raise UserError(
                f"{run.requested_by} requested run {run.thread_id} and may not approve it "
                "(SEPARATION_OF_DUTIES=1); another reviewer must decide"
            )
        needed = run.quorum or 1
        if needed > 1 and len(names) < needed:
            raise UserError(
                f"run {run.thread_id} needs {needed} distinct approvers, got {len(names)} "
                f"({', '.join(sorted(names)) or 'none named'})"
            )

    def _late(self, thread_id: str, interrupt_id: str, actor: str, decided_by) -> None:
        self.runs.record(
            thread_id,
            actor,
            "late decision refused",
            {"interrupt_id": interrupt_id, "decided_by": decided_by},
        )

    def cancel(self, thread_id: str, reason: str | None = None, actor: str = "operator") -> str:
        """Cancel a run: at once if nobody executes it (waiting, failed), else by an intent the
        runner honours at its next node boundary. Returns what happened, in one line."""
        reason = reason or "cancelled by an operator"
        for _ in range(3):  # the status may change under us; each try is one conditional UPDATE
            run = self.runs.get(thread_id)
            if run is None:
                raise UserError(
                    f"no run {thread_id!r}; `uv run recover.py --list` shows waiting runs"
                )
            if run.status in (DONE, EXPIRED, CANCELLED):
                raise NotCancellable(
                    f"run {thread_id} is already {run.status}; a finished run cannot be cancelled"
                )
            if run.status in (WAITING, FAILED):
                result = self._cancelled_result(thread_id, reason)
                if self.runs.cancel_now(thread_id, run.status, actor, reason, result):
                    close = getattr(self.inbox, "close", None)
                    if run.status == WAITING and close is not None and run.interrupt_id:
                        close(run.interrupt_id, "cancelled")
                    return result
                continue
            if run.cancel_reason is not None or self.runs.request_cancel(thread_id, actor, reason):
                return (
                    f"run {thread_id} is {run.status}: it stops as cancelled at its next step "
                    "(an action already taken is kept and reported)"
                )
        raise UserError(f"run {thread_id} keeps changing state; try the cancel again")

    def _cancelled_result(self, thread_id: str, reason: str) -> str:
        """The outcome of a cancelled run, naming every side effect that already happened: they
        are never undone, and never repeated."""
        done = []
        for receipt in self.receipts.for_thread(thread_id):
            result = json.loads(receipt["result"])
            ids = [str(v) for k, v in result.items() if k.endswith("_id") and k != "order_id"]
            done.append(f"{receipt['tool']} {', '.join(ids) or receipt['idempotency_key']}")
        if not done:
            return f"Cancelled ({reason}); nothing was done."
        return f"Cancelled ({reason}) after {'; '.join(done)} was already done (kept, not undone)."

    def _honour_cancel(self, thread_id: str, owner: str, from_status: str) -> Outcome | None:
        reason = self.runs.cancel_requested(thread_id)
        if reason is None:
            return None
        result = self._cancelled_result(thread_id, reason)
        if not self.runs.mark_cancelled(thread_id, owner, from_status, result):
            return outcome_of(self.runs.get(thread_id))
        return Outcome(thread_id, CANCELLED, result=result)

    def climb_ladder(self) -> list[Outcome]:
        """Remind, then escalate, each waiting approval at its points of the window; the
        conditional UPDATE on the run's step makes each step happen once, whoever sweeps."""
        remind_at, escalate_at = ladder_points()
        now = self.clock()
        actor = new_owner("recover")
        outcomes = []
        for row in self.runs.ladder_candidates():
            start, end = row["updated_at"], row["expires_at"]
            for step, point in ((1, remind_at), (2, escalate_at)):
                if not point or row["ladder_step"] >= step or now < start + point * (end - start):
                    continue
                due = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(end))
                detail = {"expires_at": end, "point": point}
                if not self.runs.ladder_step(
                    row["thread_id"], row["interrupt_id"], step, actor, detail
                ):
                    continue
                kind = REMINDED if step == 1 else ESCALATED
                mark = getattr(self.inbox, "mark_ladder", None)
                if mark is not None:
                    mark(row["interrupt_id"], kind)
                text = f"{kind}: approval {row['interrupt_id']} expires at {due}"
                outcomes.append(Outcome(row["thread_id"], kind, result=text))
        return outcomes

    def expire_overdue(self) -> list[Outcome]:
        """Give every overdue approval the safe default outcome (reject, reason "expired").

        Nothing of the run executes: the graph is not resumed, so a gated action never runs.
        The conditional UPDATE makes it once per run however many sweepers race."""
        outcomes = []
        actor = new_owner("recover")
        for row in self.runs.overdue():
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(row["expires_at"]))
            result = (
                f"The approval expired at {when} with no decision, so it was rejected "
                '(reason "expired") and nothing was done.'
            )
            if self.runs.expire(row["thread_id"], row["interrupt_id"], actor, result):
                close = getattr(self.inbox, "close", None)
                if close is not None:
                    close(row["interrupt_id"], "expired")
                outcomes.append(Outcome(row["thread_id"], EXPIRED, result=result))
        return outcomes

    def resume(self, thread_id: str, owner: str) -> Outcome:
        """Carry on a run ``owner`` holds (claimed, reclaimed or retried) from its checkpoint.

        What to feed the graph is read off the checkpoint, never assumed: the approved interrupt
        still pending gets the decision stored at claim time; a thread that stopped between
        nodes continues with ``None``; one that paused again is recorded as waiting; one with no
        checkpoint yet starts from its stored input; a finished one is just marked done.
        """
        run = self.runs.get(thread_id)
        if run is None or run.status not in ACTIVE or run.owner != owner:
            return outcome_of(run) if run else Outcome(thread_id, "unknown", started=False)
        if run.cancel_reason is not None:
            return self._honour_cancel(thread_id, owner, run.status)
        graph = self.graph(run.workflow)
        config = {"configurable": {"thread_id": thread_id}}
        try:
            fault("resume.start")
            state = graph.get_state(config)
        except Exception as exc:  # noqa: BLE001 - recorded (or left to the lease)
            return self._fail(thread_id, owner, run.status, exc)
        pending = [i.id for i in state.interrupts]
        approved = run.status == RESUMING and run.decision is not None
        if pending and approved and sorted(pending) == sorted(run.graph_interrupt_ids):
            try:
                input_: Any = resume_command(state.interrupts, run.decision, run.request)
            except UserError as exc:
                return self._fail(thread_id, owner, run.status, f"decision refused: {exc}")
        elif pending:
            # Paused again (or never recorded its pause): never resume a stale id, LangGraph
            # would ignore it silently. Record the pause that is really there.
            return self._guarded(
                thread_id,
                owner,
                run.status,
                lambda: self._pause(thread_id, run.workflow, owner, run.status, state),
            )
        elif not state.values and run.input:
            input_ = {"messages": [HumanMessage(run.input["text"])]}  # died before checkpoint 1
        else:
            input_ = None
        return self.run_segment(thread_id, run.workflow, input_, owner, run.status)

    def sweep(self) -> list[Outcome]:
        """One recovery pass: runs of dead processes, then answered approvals.

        Lost claims are skipped silently, so any number of sweepers may run at once.
        """
        outcomes = self.recover_expired()
        waiting = self.runs.waiting()
        approvals = self.inbox.get_many([r["interrupt_id"] for r in waiting])
        for row in waiting:
            approval = approvals.get(row["interrupt_id"])
            if approval is None or not approval.answered:
                continue
            owner = new_owner("recover")
            claimed = self.claim(
                row["thread_id"],
                row["interrupt_id"],
                approval.resume_value(),
                owner,
                decided_by=approval.decided_by,
                approvers=getattr(approval, "approvers", None),
            )
            if claimed is not None:
                continue
            fault("after-claim")
            outcomes.append(self.resume(row["thread_id"], owner))
        # after the claims: an answer already in the inbox wins over a deadline passing now
        return outcomes + self.climb_ladder() + self.expire_overdue()

    def recover_expired(self) -> list[Outcome]:
        """Take over ``running``/``resuming`` rows whose lease ran out, and finish them."""
        outcomes = []
        for row in self.runs.expired():
            owner = new_owner("recover")
            if self.runs.reclaim(row["thread_id"], row["status"], row["owner"], owner):
                outcomes.append(self.resume(row["thread_id"], owner))
        return outcomes

    def retry(self, thread_id: str) -> Outcome:
        """Retry one failed run now (``recover.py --retry``), whatever its attempt count."""
        run = self.runs.get(thread_id)
        if run is None:
            raise UserError(f"no run {thread_id!r}; `uv run recover.py --list` shows waiting runs")
        if run.status != FAILED:
            raise UserError(f"run {thread_id} is {run.status}, not failed; only failed runs retry")
        return self._retry(thread_id, run.attempts, run.decision) or outcome_of(
            self.runs.get(thread_id)
        )

    def retry_failed(self) -> list[Outcome]:
        """Retry failed runs whose backoff has passed, up to ``RETRY_MAX_ATTEMPTS`` attempts."""
        max_attempts = int(os.environ.get("RETRY_MAX_ATTEMPTS") or 5)
        base = float(os.environ.get("RETRY_BASE_SECONDS") or 30)
        now = self.runs.clock()
        outcomes = []
        for row in self.runs.failed():
            if row["attempts"] >= max_attempts:
                continue
            if now < row["updated_at"] + base * 2 ** max(0, row["attempts"] - 1):
                continue
            decision = None if row["decision"] is None else json.loads(row["decision"])
            outcome = self._retry(row["thread_id"], row["attempts"], decision)
            if outcome:
                outcomes.append(outcome)
        return outcomes

    def _retry(self, thread_id: str, attempts: int, decision: Any) -> Outcome | None:
        owner = new_owner("retry")
        to_status = RUNNING if decision is None else RESUMING
        if not self.runs.retry(thread_id, attempts, to_status, owner):
            return None
        return self.resume(thread_id, owner)

    def flush_outbox(self) -> None:
        """Send the local inbox's owed webhooks, so a delivery lost to downtime still lands."""
        try:
            Outbox(self.store.db).deliver_due()
        except UserError as exc:  # polling still resumes the runs; say why webhooks wait
            log.warning("webhook delivery skipped: %s", exc)

    # -- one segment ------------------------------------------------------------------------

    def run_segment(
        self, thread_id: str, workflow: str, input_: Any, owner: str, from_status: str
    ) -> Outcome:
        graph = self.graph(workflow)
        config = {"configurable": {"thread_id": thread_id}}

        def segment() -> Outcome:
            # Callers never hand ``None`` to a thread with pending interrupts (``resume`` records
            # those as a pause), so there is nothing to read first. ``None`` also carries on
            # past a node whose writes were saved but whose checkpoint was not (a crash in
            # between), which LangGraph shows as ``next == ()``; on a finished thread it is a
            # no-op.
            with self._heartbeat(thread_id, owner):
                # step by step, so a cancel intent is honoured at the next node boundary
                for _ in graph.stream(input_, config, durability="sync"):
                    if self.runs.cancel_requested(thread_id) is not None:
                        break
            state = graph.get_state(config)
            if state.next or state.interrupts:
                cancelled = self._honour_cancel(thread_id, owner, from_status)
                if cancelled is not None:
                    return cancelled
            if state.interrupts:
                return self._pause(thread_id, workflow, owner, from_status, state)
            result = final_answer(state.values)
            fault("segment.before-done")
            if not self.runs.mark_done(thread_id, owner, from_status, result):
                return outcome_of(self.runs.get(thread_id))
            return Outcome(thread_id, DONE, result=result)

        return self._guarded(thread_id, owner, from_status, segment)

    def _guarded(self, thread_id, owner, from_status, step) -> Outcome:
        try:
            return step()
        except Exception as exc:  # noqa: BLE001 - any failure is recorded on the run
            return self._fail(thread_id, owner, from_status, exc)

    @contextmanager
    def _heartbeat(self, thread_id: str, owner: str) -> Iterator[None]:
        """Renew the lease while the graph runs, so only a dead process's run looks abandoned."""
        stop = threading.Event()
        interval = max(0.1, lease_seconds() / 3)

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    if not self.runs.renew(thread_id, owner):
                        log.warning(
                            "lease on %s lost; its final transition will not apply", thread_id
                        )
                        return
                except Exception as exc:  # noqa: BLE001 - database blip: try next beat
                    log.warning("lease renewal for %s failed: %s", thread_id, one_line(exc))

        thread = threading.Thread(target=beat, name=f"lease-{thread_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _pause(self, thread_id, workflow, owner, from_status, state) -> Outcome:
        messages = state.values.get("messages", [])
        request = combined_request(state.interrupts, messages)
        graph_ids = [i.id for i in state.interrupts]
        asked = next((_text(m.content) for m in messages if isinstance(m, HumanMessage)), "")
        parts = [f"Request: {asked}"] if asked else []
        parts += [a.get("description", "") for a in request["action_requests"]]
        run = self.runs.get(thread_id)
        quorum = self._quorum(workflow, request)
        extra: dict[str, Any] = {}
        if getattr(self.inbox, "enforces_duties", False):
            extra = {"quorum": quorum, "requested_by": run.requested_by if run else None}
        interrupt_id = self.inbox.open(
            **extra,
            external_id=external_id(thread_id),
            dedupe_key=f"{thread_id}:{'+'.join(sorted(graph_ids))}",
            title=_truncate(f"Approve {summary(request)}", TITLE_MAX),
            description=_truncate("\n\n".join(parts), DESCRIPTION_MAX),
            request=request,
            args_schemas=self.args_schemas(workflow),
            conversation=transcript(messages),
        )
        window = run.expires_in if run and run.expires_in else self._window(workflow)
        if not self.runs.mark_waiting(
            thread_id,
            owner,
            from_status,
            interrupt_id,
            graph_ids,
            request,
            expires_at=self.clock() + window,
            quorum=quorum,
        ):
            return outcome_of(self.runs.get(thread_id))
        return Outcome(thread_id, WAITING, interrupt_id=interrupt_id)

    def _fail(self, thread_id: str, owner: str, from_status: str, exc: Exception | str) -> Outcome:
        """Record a failure; a database outage instead leaves the run to its lease."""
        error = exc if isinstance(exc, str) else one_line(exc)
        if not isinstance(exc, str) and is_transient(exc):
            log.warning(
                "%s interrupted by a database error, left for recovery: %s", thread_id, error
            )
            return Outcome(thread_id, INTERRUPTED, error=error)
        try:
            self.runs.mark_failed(thread_id, owner, from_status, error)
        except Exception as record_exc:  # noqa: BLE001 - the lease will bring it back
            log.warning("could not record failure of %s: %s", thread_id, one_line(record_exc))
            return Outcome(thread_id, INTERRUPTED, error=error)
        return Outcome(thread_id, FAILED, error=error)


def _past_deadline(run: Run | None, now: float) -> bool:
    if run is None:
        return False
    if run.status == EXPIRED:
        return True
    return run.status == WAITING and run.expires_at is not None and run.expires_at <= now


def is_transient(exc: BaseException) -> bool:
    """Errors of the database itself (down, restarted, locked), not of the run."""
    import sqlite3

    import psycopg
    from psycopg_pool import PoolTimeout

    if isinstance(exc, sqlite3.OperationalError):
        return "locked" in str(exc) or "busy" in str(exc)
    return isinstance(exc, psycopg.OperationalError | PoolTimeout)


def recovery_pass(runner: Runner, *, retry_failed: bool = False) -> list[Outcome]:
    """What one ``recover.py`` sweep does, in order: owed webhooks, dead processes' runs,
    answered approvals, and (if asked) failed runs due for a retry."""
    runner.flush_outbox()
    outcomes = runner.sweep()
    if retry_failed:
        outcomes += runner.retry_failed()
    return outcomes


@contextmanager
def open_runner() -> Iterator[Runner]:
    with open_store() as store:
        yield Runner(store)


def run_thread(
    thread_id: str,
    input_: str,
    *,
    workflow: str = "refund",
    on_start: Callable[[str], None] | None = None,
    expires_in: str | None = None,
    requested_by: str | None = None,
) -> Outcome:
    """Open the store, run one segment of a new thread, record how it ended, return."""
    with open_runner() as runner:
        return runner.start(
            input_,
            thread_id=thread_id,
            workflow=workflow,
            on_start=on_start,
            expires_in=expires_in,
            requested_by=requested_by,
        )
