"""A run's lifecycle transitions: start, claim a decision, resume, cancel, retry.

Each is one conditional transition of the ``runs`` row (the store returns the new row, or None
when another process won) followed, for the ones that continue the graph, by a segment.
"""

from __future__ import annotations

from typing import Any

from core.errors import UserError
from core.faults import fault
from core.settings import parse_duration
from inbox.duties import QuorumNotMet, SelfApproval, check
from inbox.hitl import validate_decisions
from store.runs import new_owner
from store.states import Event, Run, Status
from worker.outcome import Outcome, outcome_of
from worker.refusals import NotCancellable, Refusal, Refused, UnknownRun
from worker.requests import resume_command
from worker.segment import Segments


class Lifecycle(Segments):
    def start(
        self,
        text: str,
        *,
        thread_id: str,
        workflow: str = "refund",
        on_start: Any = None,
        expires_in: str | float | None = None,
        requested_by: str | None = None,
    ) -> Outcome:
        """Start a run once per thread id; an existing id reports that run instead.

        ``on_start`` gets the model's name once the run exists and its segment begins (so a
        refused start says nothing but the error). ``expires_in`` (``2h``, seconds) overrides
        the workflow's approval window for this run."""
        from langchain_core.messages import HumanMessage

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
        if created is None:
            return outcome_of(self._current(thread_id))
        if on_start is not None:
            on_start(self.workflow(workflow).model_name())
        return self.run_segment(
            thread_id, workflow, {"messages": [HumanMessage(text)]}, owner, Status.RUNNING
        )

    def claim(
        self,
        thread_id: str,
        interrupt_id: str,
        decision: Any,
        owner: str,
        *,
        approvers: list[str] | None = None,
    ) -> Run | Refused:
        """Take a waiting run for ``owner``: the claimed row, or why not (nothing changed).

        The deadline is enforced by the claiming UPDATE itself, so a decision racing it either
        claims or is refused, never both; the checks before it only give a better reason. Who
        may approve is checked against the rules fixed on the run when it paused, which never
        change while it waits."""
        approvers = approvers or []
        run = self.runs.get(thread_id)
        if run is None:
            return Refused(Refusal.UNKNOWN_RUN, "unknown thread")
        if run.status == Status.EXPIRED:
            return self._late(thread_id, interrupt_id, owner, approvers)
        if run.status != Status.WAITING:
            return Refused(Refusal.NOT_WAITING, f"run is {run.status}, not waiting")
        if run.interrupt_id != interrupt_id:
            return Refused(Refusal.OTHER_INTERRUPT, "run is waiting on a different interrupt")
        try:
            assert run.request is not None  # a waiting run always has its request
            validate_decisions(run.request, decision, self.args_schemas(run.workflow))
            check(
                decision["decisions"],
                approvers,
                requested_by=run.requested_by,
                separation=run.separation,
                quorum=run.quorum or 1,
                what=f"run {thread_id}",
            )
        except UserError as exc:
            detail = {"error": str(exc), "approvers": approvers}
            self.runs.record(thread_id, owner, Event.DECISION_REFUSED, detail)
            kind = (
                Refusal.DUTIES
                if isinstance(exc, SelfApproval)
                else Refusal.QUORUM
                if isinstance(exc, QuorumNotMet)
                else Refusal.INVALID
            )
            return Refused(kind, f"invalid decision: {exc}")
        claimed = self.runs.claim(thread_id, interrupt_id, decision, owner, approvers=approvers)
        if claimed is not None:
            return claimed
        current = self.runs.get(thread_id)
        if current is not None and _past_deadline(current, self.clock()):
            return self._late(thread_id, interrupt_id, owner, approvers)
        return Refused(Refusal.TAKEN, "already claimed")

    def resumed(self, claimed_at: float) -> None:
        """A claimed decision's run is resuming now (measured by the runner)."""

    def _late(self, thread_id: str, interrupt_id: str, actor: str, approvers: list[str]) -> Refused:
        detail = {"interrupt_id": interrupt_id, "approvers": approvers}
        self.runs.record(thread_id, actor, Event.LATE_DECISION_REFUSED, detail)
        return Refused(Refusal.EXPIRED, "expired")

    def resume(self, thread_id: str, owner: str) -> Outcome:
        """Carry on a run ``owner`` holds (claimed, reclaimed or retried) from its checkpoint.

        What to feed the graph is read off the checkpoint, never assumed: the approved interrupt
        still pending gets the decision stored at claim time; a thread that stopped between
        nodes continues with ``None``; one that paused again is recorded as waiting; one with no
        checkpoint yet starts from its stored input; a finished one is just marked done.
        """
        from langchain_core.messages import HumanMessage

        run = self.runs.get(thread_id)
        if run is None:
            return Outcome(thread_id, None, started=False)
        if not run.status.active or run.owner != owner:
            return outcome_of(run)
        if run.cancel_reason is not None:
            cancelled = self._honour_cancel(thread_id, owner, run.status)
            assert cancelled is not None
            return cancelled
        graph = self.graph(run.workflow)
        config = {"configurable": {"thread_id": thread_id}}
        try:
            fault("resume.start")
            state = graph.get_state(config)
        except Exception as exc:  # noqa: BLE001 - recorded (or left to the lease)
            return self._fail(thread_id, owner, run.status, exc)
        pending = [i.id for i in state.interrupts]
        approved = run.status == Status.RESUMING and run.decision is not None
        if approved:
            self.resumed(run.updated_at)  # the claim set updated_at
        input_: Any
        if pending and approved and sorted(pending) == sorted(run.graph_interrupt_ids):
            try:
                input_ = resume_command(state.interrupts, run.decision, run.request)
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

    def cancel(self, thread_id: str, reason: str | None = None, actor: str = "operator") -> str:
        """Cancel a run: at once if nobody executes it (waiting, failed), else by an intent the
        runner honours at its next node boundary. Returns what happened, in one line."""
        reason = reason or "cancelled by an operator"
        for _ in range(3):  # the status may change under us; each try is one conditional UPDATE
            run = self.runs.get(thread_id)
            if run is None:
                raise UnknownRun(
                    f"no run {thread_id!r}; `uv run recover.py --list` shows waiting runs"
                )
            if run.status.finished:
                raise NotCancellable(
                    f"run {thread_id} is already {run.status}; a finished run cannot be cancelled"
                )
            if run.status in (Status.WAITING, Status.FAILED):
                result = self.cancelled_result(thread_id, reason)
                if self.runs.cancel_now(thread_id, run.status, actor, reason, result):
                    if run.status == Status.WAITING and run.interrupt_id:
                        self.close_request(thread_id, run.interrupt_id, Status.CANCELLED, actor)
                    return result
                continue
            if run.cancel_reason is not None or self.runs.request_cancel(thread_id, actor, reason):
                return (
                    f"run {thread_id} is {run.status}: it stops as cancelled at its next step "
                    "(an action already taken is kept and reported)"
                )
        raise UserError(f"run {thread_id} keeps changing state; try the cancel again")

    def close_request(self, thread_id: str, interrupt_id: str, status: Status, actor: str) -> None:
        """Close the run's request in the inbox; if the inbox cannot, say so on the audit trail
        (a later answer is ignored anyway: the run no longer waits)."""
        if not self.inbox.close(interrupt_id, status):
            detail = {"interrupt_id": interrupt_id, "inbox": self.inbox.name, "status": status}
            self.runs.record(thread_id, actor, Event.INBOX_NOT_CLOSED, detail)

    def retry(self, thread_id: str) -> Outcome:
        """Retry one failed run now (``recover.py --retry``), whatever its attempt count."""
        run = self.runs.get(thread_id)
        if run is None:
            raise UnknownRun(f"no run {thread_id!r}; `uv run recover.py --list` shows waiting runs")
        if run.status != Status.FAILED:
            raise UserError(f"run {thread_id} is {run.status}, not failed; only failed runs retry")
        return self._retry(thread_id, run.attempts, run.decision) or outcome_of(
            self._current(thread_id)
        )

    def _retry(self, thread_id: str, attempts: int, decision: Any) -> Outcome | None:
        owner = new_owner("retry")
        to_status = Status.RUNNING if decision is None else Status.RESUMING
        if self.runs.retry(thread_id, attempts, to_status, owner) is None:
            return None
        return self.resume(thread_id, owner)


def _past_deadline(run: Run, now: float) -> bool:
    if run.status == Status.EXPIRED:
        return True
    return run.status == Status.WAITING and run.expires_at is not None and run.expires_at <= now
