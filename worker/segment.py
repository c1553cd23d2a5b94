"""One segment: run a thread's graph until it finishes or pauses, record how it ended, return.

Nothing waits in memory. A segment starts from whatever the checkpointer holds and ends in
exactly one recorded state: ``waiting`` (the approval opened in the inbox), ``done``, ``failed``
or ``cancelled`` (an intent honoured at a node boundary). A lease, renewed while the graph runs,
marks the run as owned; a database outage leaves the row to that lease instead of failing it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import closing
from typing import Any

from core.errors import one_line
from core.faults import fault
from inbox import external_id
from inbox.base import Inbox, Rules
from inbox.views import seen_as
from ops import metrics
from store import halts
from store.receipts import Receipts
from store.runs import RunStore
from store.states import Run, Status
from worker import traces
from worker.authority import band_quorum, bands_for, groups_needed, request_amount
from worker.effects import bound
from worker.graphs import Graphs
from worker.lease import Leases
from worker.lg_tap import Tap, open_tap
from worker.outcome import Note, Outcome, outcome_of
from worker.policy import next_ladder_at, separation_of_duties
from worker.requests import combined, final_answer, origins, title_and_description, transcript

log = logging.getLogger(__name__)


def is_transient(exc: BaseException) -> bool:
    """Errors of the database itself (down, restarted, locked), not of the run."""
    import sqlite3

    import psycopg
    from psycopg_pool import PoolTimeout

    if isinstance(exc, sqlite3.OperationalError):
        return "locked" in str(exc) or "busy" in str(exc)
    return isinstance(exc, psycopg.OperationalError | PoolTimeout)


class Segments:
    def __init__(
        self,
        graphs: Graphs,
        runs: RunStore,
        inbox: Inbox,
        receipts: Receipts,
        leases: Leases,
        clock: Callable[[], float],
    ):
        self.graphs = graphs
        self.runs = runs
        self.inbox = inbox
        self.receipts = receipts
        self.leases = leases
        self.clock = clock

    def run(
        self,
        thread_id: str,
        workflow: str,
        input_: Any,
        owner: str,
        from_status: Status,
        run: Run | None = None,
    ) -> Outcome:
        """``run`` is the row this process just wrote (created, claimed), if it has it: a pause
        then takes the run's fixed fields (requester, window) from it instead of reading them."""
        graph = self.graphs.graph(workflow)
        config = {"configurable": {"thread_id": thread_id}}
        tap = open_tap(self.runs.tables.lg(), thread_id, self.clock)  # a /lg run's stream

        def segment() -> Outcome:
            # Callers never hand ``None`` to a thread with pending interrupts (``resume`` records
            # those as a pause), so there is nothing to read first. ``None`` also carries on
            # past a node whose writes were saved but whose checkpoint was not (a crash in
            # between), which LangGraph shows as ``next == ()``; on a finished thread it is a
            # no-op.
            with self._heartbeat(thread_id, owner), bound(self.receipts):
                # step by step, so a cancel intent is honoured at the next node boundary
                ended = self._stream(graph, workflow, input_, config, thread_id, tap)
            if ended is not None:  # ran to its end: nothing pending, no state to read
                fault("segment.before-done")
                done = self.runs.mark_done(thread_id, owner, from_status, final_answer(ended))
                return outcome_of(done or self.current(thread_id), started=True)
            state = graph.get_state(config, subgraphs=True)  # which node each interrupt is in
            if state.next or state.interrupts:
                cancelled = self.honour_cancel(thread_id, owner, from_status)
                if cancelled is not None:
                    return cancelled
            if state.next and not state.interrupts:  # stopped at a boundary: a halt?
                found = self.runs.tables.halts().holding(workflow)
                if found is not None:
                    return self.park(thread_id, owner, from_status, halts.Halted(found))
            if state.interrupts:
                return self.pause(thread_id, workflow, owner, from_status, state, run)
            result = final_answer(state.values)
            fault("segment.before-done")
            done = self.runs.mark_done(thread_id, owner, from_status, result)
            return outcome_of(done or self.current(thread_id), started=True)

        with (
            metrics.timed("segment"),
            traces.segment(self.runs.tables.traces(), thread_id, from_status),
        ):
            outcome = self.guarded(thread_id, owner, from_status, segment)
        if tap is not None:
            tap.end(outcome.status, outcome.error)
        return outcome

    def _stream(
        self,
        graph: Any,
        workflow: str,
        input_: Any,
        config: dict[str, Any],
        thread_id: str,
        tap: Tap | None = None,
    ) -> dict[str, Any] | None:
        """Run the graph to its next pause or end. The cancel intent is read when the next
        step's tasks are announced, before they run: once per node boundary, never after the
        last step (nothing is left to stop). Returns the final values when the graph ran to its
        end (no interrupt, not stopped), so the caller need not read the checkpoint again;
        None when it stopped or paused, and the caller reads the state."""
        from worker.asyncgraph import needs_async, stream_async

        def stop() -> bool:
            return self.runs.tables.halts().stop_at_boundary(thread_id, workflow)

        if needs_async(graph, self.graphs.workflow(workflow).asynchronous):
            stream_async(graph, input_, config, stop)
            return None
        values: dict[str, Any] | None = None
        paused = False
        ran = False  # a step finished since the last boundary was checked
        modes = ["tasks", "updates", "values", *(tap.extra_modes if tap is not None else [])]
        with closing(graph.stream(input_, config, durability="sync", stream_mode=modes)) as steps:
            for mode, chunk in steps:
                if tap is not None:
                    tap(mode, chunk)
                if mode == "values":
                    values = chunk
                elif mode == "updates":
                    paused = paused or "__interrupt__" in chunk
                elif "result" in chunk:  # a task finished
                    ran = True
                elif ran:  # the next step's tasks, announced before they run
                    ran = False
                    if stop():
                        return None
        return None if paused else values

    def current(self, thread_id: str) -> Run:
        """The row after a transition this process lost (someone else moved it)."""
        run = self.runs.get(thread_id)
        assert run is not None  # runs are never deleted while a process works on them
        return run

    def guarded(
        self, thread_id: str, owner: str, from_status: Status, step: Callable[[], Outcome]
    ) -> Outcome:
        try:
            return step()
        except halts.Halted as halted:  # the stop button, before a side effect
            return self.park(thread_id, owner, from_status, halted)
        except Exception as exc:  # noqa: BLE001 - any failure is recorded on the run
            return self.fail(thread_id, owner, from_status, exc)

    def park(
        self, thread_id: str, owner: str, from_status: Status, halted: halts.Halted
    ) -> Outcome:
        """Leave the run where a halt stopped it, parked until that halt is lifted."""
        if not self.runs.tables.halts().park(thread_id, owner, halted.halt, self.clock()):
            return outcome_of(self.current(thread_id))  # the lease was lost meanwhile
        log.info("%s stopped by a halt: %s", thread_id, halted.halt)
        return Outcome(thread_id, from_status, error=str(halted.halt), note=Note.HALTED)

    def _heartbeat(self, thread_id: str, owner: str) -> Any:
        """Renew the lease while the graph runs, so only a dead process's run looks abandoned
        (one renewing thread per worker: ``worker.lease``)."""
        return self.leases.held(thread_id, owner)

    def pause(
        self,
        thread_id: str,
        workflow: str,
        owner: str,
        from_status: Status,
        state: Any,
        run: Run | None = None,
    ) -> Outcome:
        """Open the approval in the inbox, then record the run as waiting on it, with the rules
        (requester, separation of duties, quorum, deadline) fixed for every process."""
        messages = state.values.get("messages", [])
        flow = self.graphs.workflow(workflow)
        where = origins(state)
        typed = combined(state.interrupts, messages, where).locking(flow.locked_arguments())
        graph_ids = [i.id for i in state.interrupts]
        run = run or self.current(thread_id)  # requested_by and expires_in never change
        now = self.clock()
        bands = bands_for(workflow)
        amount = request_amount(flow, typed)
        rules = Rules(
            requested_by=run.requested_by,
            separation=separation_of_duties(),
            # the policy's quorum or the authority band's, whichever is higher: one number that
            # every view (page, Slack, e-mail, API) shows and the decision path counts
            quorum=max(flow.quorum(typed), band_quorum(bands, amount)),
            expires_at=now + (run.expires_in or flow.expires_in()),
        )
        title, description = title_and_description(typed, messages)
        interrupt_id = self.inbox.open(
            external_id=external_id(thread_id),
            dedupe_key=f"{thread_id}:{'+'.join(sorted(graph_ids))}",
            title=title,
            description=description,
            request=typed,
            args_schemas=self.graphs.args_schemas(workflow),
            conversation=transcript(messages),
            rules=rules,
        )
        waiting = self.runs.mark_waiting(
            thread_id,
            owner,
            from_status,
            interrupt_id,
            graph_ids,
            typed,
            shown=[
                {**a.to_json(), "seen": seen_as(v)}
                for a, v in zip(typed.actions, self.graphs.views(workflow, typed), strict=False)
            ],
            expires_at=rules.expires_at,
            quorum=rules.quorum,
            separation=rules.separation,
            request_digest=typed.digest(),
            ladder_at=next_ladder_at(now, rules.expires_at, 0),
            authority=bands,
            approver_groups=groups_needed(bands, amount),
        )
        return outcome_of(waiting or self.current(thread_id), started=True)

    def fail(
        self, thread_id: str, owner: str, from_status: Status, exc: Exception | str
    ) -> Outcome:
        """Record a failure; a database outage instead leaves the run to its lease."""
        error = exc if isinstance(exc, str) else one_line(exc)
        if not isinstance(exc, str) and is_transient(exc):
            log.warning(
                "%s interrupted by a database error, left for recovery: %s", thread_id, error
            )
            return Outcome(thread_id, from_status, error=error, note=Note.INTERRUPTED)
        try:
            self.runs.mark_failed(thread_id, owner, from_status, error)
        except Exception as record_exc:  # noqa: BLE001 - the lease will bring it back
            log.warning("could not record failure of %s: %s", thread_id, one_line(record_exc))
            return Outcome(thread_id, from_status, error=error, note=Note.INTERRUPTED)
        return Outcome(thread_id, Status.FAILED, error=error)

    def cancelled_result(self, thread_id: str, reason: str) -> str:
        """The outcome of a cancelled run, naming every side effect that already happened: they
        are never undone, and never repeated."""
        done = []
        for receipt in self.receipts.for_thread(thread_id):
            result = receipt.result
            ids = [str(v) for k, v in result.items() if k.endswith("_id") and k != "order_id"]
            done.append(f"{receipt.tool} {', '.join(ids) or receipt.idempotency_key}")
        if not done:
            return f"Cancelled ({reason}); nothing was done."
        return f"Cancelled ({reason}) after {'; '.join(done)} was already done (kept, not undone)."

    def honour_cancel(self, thread_id: str, owner: str, from_status: Status) -> Outcome | None:
        reason = self.runs.cancel_requested(thread_id)
        if reason is None:
            return None
        result = self.cancelled_result(thread_id, reason)
        cancelled = self.runs.mark_cancelled(thread_id, owner, from_status, result)
        return outcome_of(cancelled or self.current(thread_id), started=True)
