"""The worker wired in one place, and the ways entry points open it.

:class:`Runner` builds the small objects the worker is made of, each with one job, and hands
each the ones it uses: ``graphs`` (compiled graphs, edit schemas), ``segments`` (one segment of a
graph), ``decisions`` (the one decision path), ``lifecycle`` (start, resume, cancel, retry) and
``sweeper`` (the recovery pass). Its methods only forward to them, so an entry point needs one
object, and no behaviour lives here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from core import settings, tracing
from inbox import open_inbox
from inbox.base import Inbox
from ops.notify import Notifier
from store.approvals import RunApprovals
from store.db import Store, open_store
from store.receipts import Receipts
from store.run_ids import RunIds, new_run_id
from store.runs import RunStore, Within, lease_seconds
from store.states import Run
from worker import traces
from worker.decisions import Decision, Decisions, Result
from worker.graphs import Graphs
from worker.lease import Leases
from worker.lifecycle import Lifecycle
from worker.outcome import Outcome
from worker.segment import Segments
from worker.sweep import Sweeper


class Runner:
    def __init__(
        self,
        store: Store,
        inbox: Inbox | None = None,
        clock: Callable[[], float] = time.time,
        run_ids: RunIds = new_run_id,
    ):
        settings.check()  # a bad setting stops here, before any run is touched
        tracing.configure()  # at start-up, so no decision pays for importing the SDK
        self.store = store
        self.clock = clock  # one notion of "now" for deadlines, in tests too
        self.graphs = Graphs(store)
        notifier = Notifier(store.db, self.graphs.views, self.graphs.amount)  # notify, metrics
        committed = traces.noting(notifier.committed, lambda: self.decisions, clock)
        self.runs = RunStore(store.db, clock, notifier.on_transition, committed)
        self.inbox = inbox if inbox is not None else open_inbox(store.db, clock)
        self.approvals = RunApprovals(store.db, clock)
        leases = Leases(self.runs.renew, lambda: lease_seconds() / 3)
        self.segments = Segments(
            self.graphs, self.runs, self.inbox, Receipts(store.db), leases, clock
        )
        self.decisions = Decisions(self.runs, self.approvals, self.graphs, clock)
        self.lifecycle = Lifecycle(
            self.segments, self.runs, self.graphs, self.inbox, clock, run_ids
        )
        self.sweeper = Sweeper(store, self.runs, self.inbox, self.decisions, self.lifecycle, clock)

    # what entry points, the API and tests call most, forwarded

    def start(self, text: str, **kwargs: Any) -> Outcome:
        with traces.starting(kwargs.get("workflow", "refund")):
            return self.lifecycle.start(text, **kwargs)

    def decide(
        self, decision: Decision, *, handoff: bool = False, within: Within | None = None
    ) -> Result:
        return self.decisions.decide(decision, handoff=handoff, within=within)

    def resume(self, thread_id: str, owner: str, claimed: Run | None = None) -> Outcome:
        return self.lifecycle.resume(thread_id, owner, claimed)

    def resume_claimed(self, claimed: Run) -> Outcome:
        return self.lifecycle.resume_claimed(claimed)

    def cancel(self, thread_id: str, reason: str | None = None, actor: str = "operator") -> str:
        return self.lifecycle.cancel(thread_id, reason, actor)

    def retry(self, thread_id: str) -> Outcome:
        return self.lifecycle.retry(thread_id)

    def sweep(self) -> list[Outcome]:
        return self.sweeper.sweep()

    def recovery_pass(self, *, retry_failed: bool = False) -> list[Outcome]:
        return self.sweeper.recovery_pass(retry_failed=retry_failed)

    def graph(self, name: str) -> Any:
        return self.graphs.graph(name)

    def args_schemas(self, name: str) -> dict[str, dict]:
        return self.graphs.args_schemas(name)

    def needs(self, run: Run) -> str | None:
        return self.decisions.needs(run)


@contextmanager
def open_runner() -> Iterator[Runner]:
    with open_store() as store:
        runner = Runner(store)
        try:
            yield runner
        finally:
            runner.inbox.shutdown()


def run_thread(
    thread_id: str | None,
    input_: str,
    *,
    workflow: str = "refund",
    on_start: Callable[[str, str], None] | None = None,
    expires_in: str | None = None,
    requested_by: str | None = None,
) -> Outcome:
    """Open the store, run one segment of a new thread (``thread_id``, or a new id when None),
    record how it ended, return."""
    with open_runner() as runner:
        return runner.start(
            input_,
            thread_id=thread_id,
            workflow=workflow,
            on_start=on_start,
            expires_in=expires_in,
            requested_by=requested_by,
        )
