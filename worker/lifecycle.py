"""A run's lifecycle: start, resume what a decision (or a retry, or a take-over) claimed,
cancel, retry.

Each step is one conditional transition of the ``runs`` row (the store returns the new row, or
None when another process won) followed, for the ones that continue the graph, by a segment.
Decisions themselves are judged and claimed by the one decision path (``worker.decisions``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from core.errors import UserError
from core.faults import fault, shielded
from core.limits import check_name
from core.settings import parse_duration
from inbox.base import Inbox
from ops import metrics
from store.claimed import queued
from store.run_ids import ATTEMPTS, RunIds, new_run_id
from store.runs import RunStore, new_owner
from store.states import Event, Run, Status
from worker import refusals, traces
from worker.ballot import Source
from worker.graphs import Graphs
from worker.outcome import Note, Outcome, outcome_of
from worker.refusals import Refusal, Refused, unknown_run
from worker.requests import resume_command
from worker.segment import Segments

log = logging.getLogger(__name__)


class Lifecycle:
    def __init__(
        self,
        segments: Segments,
        runs: RunStore,
        graphs: Graphs,
        inbox: Inbox,
        clock: Callable[[], float],
        run_ids: RunIds = new_run_id,
    ):
        self.segments = segments
        self.runs = runs
        self.graphs = graphs
        self.inbox = inbox
        self.clock = clock
        self.run_ids = run_ids

    def start(
        self,
        text: str,
        *,
        thread_id: str | None = None,
        workflow: str = "refund",
        on_start: Callable[[str, str], None] | None = None,
        expires_in: str | float | None = None,
        requested_by: str | None = None,
        quota: int | None = None,
    ) -> Outcome:
        """Start a run once per chosen thread id (an existing one reports that run instead);
        without one, under a new id from ``run_ids`` (``Outcome.thread_id`` says which).

        A drawn id that names an existing run is never that run: the insert does nothing, the
        id is drawn again, and after ``ATTEMPTS`` the start is refused (``Refusal.ID_TAKEN``).
        ``on_start`` gets the run's id and the model's name once the run exists and its segment
        begins (so a refused start says nothing but the error). ``expires_in`` (``2h``, seconds)
        overrides the workflow's approval window for this run; ``quota``: the most open runs
        ``requested_by`` may have (``store.ratelimits.OverQuota`` past it, nothing written)."""
        from langchain_core.messages import HumanMessage

        if not text.strip():
            raise UserError("the request text is empty; say what the agent should do")
        window = None if expires_in is None else parse_duration(expires_in, "expires_in")
        if requested_by is not None:  # run.py's --requested-by enters here as well as keys
            requested_by = check_name(requested_by, "the requester's name")
        self.graphs.graph(workflow)  # an unknown or broken workflow is refused before a run exists
        stop = self.runs.tables.halts().holding(workflow)
        if stop is not None:  # no new run starts while its workflow (or everything) is halted
            raise refusals.halted(stop)
        owner = new_owner("run")
        create = functools.partial(
            self.runs.create,
            workflow=workflow,
            input_={"text": text},
            owner=owner,
            expires_in=window,
            requested_by=requested_by,
            quota=quota,
        )
        created: Run | None
        if thread_id is None:
            thread_id, created = self._create_new(create)
        else:
            created = create(thread_id)
            if created is None:
                return outcome_of(self.segments.current(thread_id))
        traces.begun(self.runs.tables.traces(), thread_id)
        # the run exists: its first segment runs whatever telling the caller does
        shielded("start.created", functools.partial(self._started, on_start, thread_id, workflow))
        return self.segments.run(
            thread_id, workflow, {"messages": [HumanMessage(text)]}, owner, Status.RUNNING, created
        )

    def _started(
        self, on_start: Callable[[str, str], None] | None, thread_id: str, workflow: str
    ) -> None:
        if on_start is not None:
            on_start(thread_id, self.graphs.workflow(workflow).model_name())

    def _create_new(self, create: Callable[[str], Run | None]) -> tuple[str, Run]:
        """A new run under an id drawn from ``run_ids``. The insert is conditional, so an id
        that names an existing run inserts nothing and is drawn again: the start never joins
        a run it did not ask for. ``ATTEMPTS`` taken ids refuse it, loudly, with nothing
        written."""
        for _ in range(ATTEMPTS):
            thread_id = self.run_ids()
            created = create(thread_id)
            if created is not None:
                return thread_id, created
            log.warning("the id %s drawn for a new run names an existing run", thread_id)
        raise Refused(
            Refusal.ID_TAKEN,
            f"no run started: each of the {ATTEMPTS} ids drawn for it named an existing run; "
            "send the start again",
        )

    def resume(self, thread_id: str, owner: str, claimed: Run | None = None) -> Outcome:
        """``_resume``, traced as the run's resume in whichever process took it."""
        with traces.resuming(self.runs.tables.traces(), thread_id, owner):
            return self._resume(thread_id, owner, claimed)

    def _resume(self, thread_id: str, owner: str, claimed: Run | None = None) -> Outcome:
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
            cancelled = self.segments.honour_cancel(thread_id, owner, run.status)
            assert cancelled is not None
            return cancelled
        graph = self.graphs.graph(run.workflow)
        config = {"configurable": {"thread_id": thread_id}}
        try:
            fault("resume.start")
            state = graph.get_state(config, subgraphs=True)
        except Exception as exc:  # noqa: BLE001 - recorded (or left to the lease)
            return self.segments.fail(thread_id, owner, run.status, exc)
        pending = [i.id for i in state.interrupts]
        approved = run.status == Status.RESUMING and run.decision is not None
        if approved:
            waited = max(0.0, self.clock() - run.updated_at)  # the claim set updated_at
            shielded("resume.claimed", functools.partial(metrics.resumed, waited))
        input_: Any
        if pending and approved and sorted(pending) == sorted(run.graph_interrupt_ids):
            try:
                input_ = resume_command(state.interrupts, run.decision, run.request)
            except UserError as exc:
                return self.segments.fail(thread_id, owner, run.status, f"decision refused: {exc}")
        elif pending:
            # Paused again (or never recorded its pause): never resume a stale id, LangGraph
            # would ignore it silently. Record the pause that is really there.
            return self.segments.guarded(
                thread_id,
                owner,
                run.status,
                lambda: self.segments.pause(thread_id, run.workflow, owner, run.status, state, run),
            )
        elif not state.values and run.input:
            input_ = {"messages": [HumanMessage(run.input["text"])]}  # died before checkpoint 1
        else:
            input_ = None
        return self.segments.run(thread_id, run.workflow, input_, owner, run.status, run)

    def resume_claimed(self, claimed: Run, role: str = "resumer") -> Outcome:
        """``resume`` of the row a claim just returned. A queued claim (``store.claimed``) is
        taken first, by id, under an owner of ``role``'s: if a resumer took it meanwhile, this
        caller does nothing and reports the run as it is."""
        if queued(claimed):
            taken = self.runs.reclaim(
                claimed.thread_id, claimed.status, claimed.owner or "", new_owner(role)
            )
            if taken is None:  # the run's resumer is elsewhere: say so, not "already exists"
                now = outcome_of(self.segments.current(claimed.thread_id), started=True)
                return now if now.status and now.status.finished else replace(now, note=Note.TAKEN)
            claimed = taken
        return self.resume(claimed.thread_id, claimed.owner or "", claimed)

    def queued_claim(self, thread_id: str, interrupt_id: str) -> Run | None:
        """The queued claim of a decision another source made on ``interrupt_id`` (the inbox
        command line, whose signed delivery arrives after it), not taken yet: for the caller to
        wake its resumer about, or take itself (``resume_claimed``); else None."""
        run = self.runs.get(thread_id)
        if run is None or run.status != Status.RESUMING or run.interrupt_id != interrupt_id:
            return None
        if not queued(run):
            return None
        # only the command line's claim is the delivery's to take up: a claim another source
        # (the API, a page) made first leaves this delivery's decision refused as decided
        claim = self.runs.last_claim(thread_id)
        return run if claim is not None and claim.facts.get("source") == Source.CLI else None

    def cancel(self, thread_id: str, reason: str | None = None, actor: str = "operator") -> str:
        """Cancel a run: at once if nobody executes it (waiting, failed), else by an intent the
        runner honours at its next node boundary. Returns what happened, in one line."""
        reason = reason or "cancelled by an operator"
        for _ in range(3):  # the status may change under us; each try is one conditional UPDATE
            run = self.runs.get(thread_id)
            if run is None:
                raise unknown_run(thread_id)
            if run.status.finished:
                raise Refused(
                    Refusal.NOT_CANCELLABLE,
                    f"run {thread_id} is already {run.status}; a finished run cannot be cancelled",
                )
            if run.status in (Status.WAITING, Status.FAILED):
                result = self.segments.cancelled_result(thread_id, reason)
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
        claimed = self.claim_retry(thread_id)
        if claimed is None:
            return outcome_of(self.segments.current(thread_id))
        return self.resume_claimed(claimed, "retry")

    def claim_retry(self, thread_id: str) -> Run | None:
        """The claim of :meth:`retry`: the failed run queued for a resumer (or for this process
        to take, ``resume_claimed``); None if another process retried it first."""
        run = self.runs.get(thread_id)
        if run is None:
            raise unknown_run(thread_id)
        if run.status != Status.FAILED:
            raise Refused(
                Refusal.NOT_FAILED,
                f"run {thread_id} is {run.status}, not failed; only failed runs retry",
            )
        to_status = Status.RUNNING if run.decision is None else Status.RESUMING
        return self.runs.retry(thread_id, run.attempts, to_status, new_owner("retry"))

    def take_over(self, thread_id: str, actor: str) -> Run | None:
        """A stuck run (its lease ran out: its process died) reclaimed by ``actor`` and queued
        for a resumer, this one run only; None if it is still leased, not active, or someone was
        faster. The sweep does the same for every such run."""
        run = self.runs.get(thread_id)
        if run is None or not run.status.active or (run.lease_until or 0) >= self.clock():
            return None
        return self.runs.reclaim(
            thread_id, run.status, run.owner or "", new_owner(actor), queue=True
        )

    def retry_attempt(self, thread_id: str, attempts: int, decision: Any) -> Outcome | None:
        """One retry of a failed run read with ``attempts``; None if another process retried
        it first."""
        owner = new_owner("retry")
        to_status = Status.RUNNING if decision is None else Status.RESUMING
        retried = self.runs.retry(thread_id, attempts, to_status, owner)
        if retried is None:
            return None
        return self.resume_claimed(retried, "retry")
