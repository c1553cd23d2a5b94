"""A run's lifecycle transitions: start, claim a decision, resume, cancel, retry.

Each is one conditional transition of the ``runs`` row (the store returns the new row, or None
when another process won) followed, for the ones that continue the graph, by a segment.
"""

from __future__ import annotations

import logging
from typing import Any

from core.errors import UserError, scrub
from core.faults import fault
from core.settings import parse_duration
from inbox.duties import QuorumNotMet, SelfApproval, approving, check, distinct, normalize
from inbox.hitl import edited_request, validate_decisions
from store.runs import new_owner
from store.states import Event, Run, Status
from worker.outcome import Outcome, outcome_of
from worker.refusals import NotCancellable, Pending, Refusal, Refused, UnknownRun
from worker.requests import resume_command
from worker.segment import Segments

log = logging.getLogger(__name__)


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
            thread_id, workflow, {"messages": [HumanMessage(text)]}, owner, Status.RUNNING, created
        )

    def claim(
        self,
        thread_id: str,
        interrupt_id: str,
        decision: Any,
        owner: str,
        *,
        approvers: list[str] | None = None,
        record: bool = True,
    ) -> Run | Refused:
        """Take a waiting run for ``owner``: the claimed row, or why not (nothing changed).

        The deadline is enforced by the claiming UPDATE itself, so a decision racing it either
        claims or is refused, never both; the checks before it only give a better reason. Who
        may approve is checked against the rules fixed on the run when it paused, which never
        change while it waits."""
        approvers = approvers or []
        run = self._waiting(thread_id, interrupt_id, owner, approvers, record=record)
        if isinstance(run, Refused):
            return run
        judged = self._judge(run, decision, approvers, owner, record=record)
        if isinstance(judged, Refused):
            if judged.reason == Refusal.QUORUM:
                # an edit that needs more approvers: the inbox collects them (if it can)
                self.inbox.raise_quorum(interrupt_id, self._needed(run, decision))
            return judged
        claimed = self.runs.claim(thread_id, interrupt_id, decision, owner, approvers=approvers)
        if claimed is not None:
            return claimed
        current = self.runs.get(thread_id)
        if current is not None and _past_deadline(current, self.clock()):
            return self._late(thread_id, interrupt_id, owner, approvers, record=record)
        return Refused(Refusal.TAKEN, "already claimed")

    def decide(
        self,
        thread_id: str,
        interrupt_id: str,
        digest: str,
        decision: Any,
        reviewer: str,
        owner: str,
    ) -> Run | Refused | Pending:
        """One authenticated reviewer's decision (the API, the web inbox) on the request they
        saw (``digest``). An approval that needs a quorum is counted, one per reviewer, and
        claims the run when enough distinct reviewers agree."""
        # An API refusal changes no table (it is logged): audit rows are for what happened.
        run = self._waiting(thread_id, interrupt_id, owner, [reviewer], record=False)
        if isinstance(run, Refused):
            return run
        if digest != run.request_digest:
            return Refused(
                Refusal.STALE,
                "the request changed since it was read (or the digest is wrong): read the run "
                "again and decide on what it proposes now",
            )
        judged = self._judge(run, decision, [reviewer], owner, quorum=1, record=False)
        if isinstance(judged, Refused):
            return judged
        needed = self._needed(run, decision)
        decisions = decision["decisions"]
        if not approving(decisions) or needed <= 1:
            return self._claimed_here(thread_id, interrupt_id, decision, owner, [reviewer])
        for other in self.approvals.approvals(thread_id, interrupt_id):
            if other["decisions"] != decisions:
                return Refused(
                    Refusal.INVALID,
                    f"{other['reviewer']} approved other decisions; approvers of a quorum must "
                    "agree (or one of you rejects)",
                )
        rows = self.approvals.add_approval(
            thread_id, interrupt_id, reviewer, decisions, normalize(reviewer)
        )
        if rows is None:
            return Refused(Refusal.REPEATED, f"{reviewer} already approved; {needed} must")
        names = distinct(r["reviewer"] for r in rows)
        if len(names) < needed:
            return Pending(names, needed)
        return self._claimed_here(thread_id, interrupt_id, decision, owner, names)

    def _claimed_here(
        self, thread_id: str, interrupt_id: str, decision: Any, owner: str, approvers: list[str]
    ) -> Run | Refused:
        """Claim, then close the inbox's copy of the request: it was decided here, so nobody
        answers it there afterwards."""
        claimed = self.claim(
            thread_id, interrupt_id, decision, owner, approvers=approvers, record=False
        )
        if isinstance(claimed, Run):
            self.inbox.close(interrupt_id, "decided elsewhere")
        return claimed

    def _waiting(
        self,
        thread_id: str,
        interrupt_id: str,
        actor: str,
        approvers: list[str],
        *,
        record: bool = True,
    ) -> Run | Refused:
        """The run, if it still waits on ``interrupt_id``; else why not."""
        run = self.runs.get(thread_id)
        if run is None:
            return Refused(Refusal.UNKNOWN_RUN, "unknown thread")
        if run.status == Status.EXPIRED:
            return self._late(thread_id, interrupt_id, actor, approvers, record=record)
        if run.status != Status.WAITING:
            return Refused(Refusal.NOT_WAITING, f"run is {run.status}, not waiting")
        if run.interrupt_id != interrupt_id:
            return Refused(Refusal.OTHER_INTERRUPT, "run is waiting on a different interrupt")
        return run

    def _needed(self, run: Run, decision: Any) -> int:
        """Distinct approvers the decision needs: the quorum fixed at the pause, or more if an
        edit changed the arguments into a larger one (the policy judged again)."""
        assert run.request is not None
        edited = edited_request(run.request, decision.get("decisions") or [])
        return max(run.quorum or 1, self.workflow(run.workflow).quorum(edited))

    def _judge(
        self,
        run: Run,
        decision: Any,
        approvers: list[str],
        actor: str,
        quorum: int | None = None,
        *,
        record: bool = True,
    ) -> Refused | None:
        """Refuse an invalid, unstorable or unauthorised decision (recorded on the trail)."""
        try:
            assert run.request is not None  # a waiting run always has its request
            validate_decisions(run.request, decision, self.args_schemas(run.workflow))
            check(
                decision["decisions"],
                approvers,
                requested_by=run.requested_by,
                separation=run.separation,
                quorum=self._needed(run, decision) if quorum is None else quorum,
                what=f"run {run.thread_id}",
            )
        except UserError as exc:
            detail = {"error": str(exc), "approvers": approvers}
            if record:
                self.runs.record(run.thread_id, actor, Event.DECISION_REFUSED, detail)
            else:
                log.warning("decision on %s refused: %s", run.thread_id, scrub(str(exc)))
            kind = (
                Refusal.DUTIES
                if isinstance(exc, SelfApproval)
                else Refusal.QUORUM
                if isinstance(exc, QuorumNotMet)
                else Refusal.INVALID
            )
            return Refused(kind, f"invalid decision: {exc}")
        return None

    def resumed(self, claimed_at: float) -> None:
        """A claimed decision's run is resuming now (measured by the runner)."""

    def _late(
        self,
        thread_id: str,
        interrupt_id: str,
        actor: str,
        approvers: list[str],
        *,
        record: bool = True,
    ) -> Refused:
        detail = {"interrupt_id": interrupt_id, "approvers": approvers}
        if record:
            self.runs.record(thread_id, actor, Event.LATE_DECISION_REFUSED, detail)
        else:
            log.warning("late decision on %s refused (%s)", thread_id, ", ".join(approvers))
        return Refused(Refusal.EXPIRED, "expired")

    def resume(self, thread_id: str, owner: str, claimed: Run | None = None) -> Outcome:
        """Carry on a run ``owner`` holds (claimed, reclaimed or retried) from its checkpoint.

        ``claimed`` is the row a transition of this process just returned (``claim``,
        ``reclaim``), which spares reading it again; a cancel requested since is seen at the
        first step boundary, as for any running segment.

        What to feed the graph is read off the checkpoint, never assumed: the approved interrupt
        still pending gets the decision stored at claim time; a thread that stopped between
        nodes continues with ``None``; one that paused again is recorded as waiting; one with no
        checkpoint yet starts from its stored input; a finished one is just marked done.
        """
        from langchain_core.messages import HumanMessage

        run = claimed if claimed is not None and claimed.owner == owner else None
        run = run or self.runs.get(thread_id)
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
                lambda: self._pause(thread_id, run.workflow, owner, run.status, state, run),
            )
        elif not state.values and run.input:
            input_ = {"messages": [HumanMessage(run.input["text"])]}  # died before checkpoint 1
        else:
            input_ = None
        return self.run_segment(thread_id, run.workflow, input_, owner, run.status, run)

    def resume_claimed(self, claimed: Run) -> Outcome:
        """``resume`` of the row a claim by this process just returned (the API, the pages)."""
        return self.resume(claimed.thread_id, claimed.owner or "", claimed)

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
        retried = self.runs.retry(thread_id, attempts, to_status, owner)
        if retried is None:
            return None
        return self.resume(thread_id, owner, retried)


def _past_deadline(run: Run, now: float) -> bool:
    if run.status == Status.EXPIRED:
        return True
    return run.status == Status.WAITING and run.expires_at is not None and run.expires_at <= now
