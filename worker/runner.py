"""The worker wired in one place, and the ways entry points open it.

:class:`Runner` builds the small objects the worker is made of, each with one job, and hands
each the ones it uses: ``graphs`` (compiled graphs, edit schemas), ``segments`` (one segment of a
graph), ``decisions`` (the one decision path), ``lifecycle`` (start, resume, cancel, retry) and
``sweeper`` (the recovery pass). Its methods forward to them, so an entry point needs one
object; the one thing it adds is the hand-off: a run a decision (or a retry, or a take-over)
claimed is queued in the database by that claim's commit (``store.claimed``), and the
:attr:`Runner.resumer` of this process, if it has one, is woken the moment it is claimed. No
source can leave a claimed run without its resume: a process killed right after the commit
leaves a queued row that any live resumer takes at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from core import settings, tracing
from core.faults import shielded
from core.hitl import HitlRequest
from inbox import open_inbox
from inbox.base import Inbox
from inbox.outbox import FLUSHER, Senders
from ops import channels
from ops.notify import Notifier
from ops.proposal import tell
from store.db import Store, open_store
from store.receipts import Receipts
from store.run_ids import RunIds, new_run_id
from store.runs import RunStore, Within, lease_seconds
from store.states import Run
from worker import traces
from worker.decisions import Applied, Decision, Decisions, Pending, Result
from worker.graphs import Graphs
from worker.lease import Leases
from worker.lifecycle import Lifecycle
from worker.outcome import Outcome, outcome_of
from worker.segment import Segments
from worker.sweep import Sweeper

log = logging.getLogger(__name__)


class Runner:
    def __init__(
        self,
        store: Store,
        inbox: Inbox | None = None,
        clock: Callable[[], float] = time.time,
        run_ids: RunIds = new_run_id,
        senders: Senders | None = None,
    ):
        """``senders``: what the process sends besides webhooks (``ops.channels.senders``,
        the default); wired into the process's sending threads here, where it is built."""
        settings.check()  # a bad setting stops here, before any run is touched
        tracing.configure()  # at start-up, so no decision pays for importing the SDK
        self.store = store
        self.senders = senders if senders is not None else channels.senders()
        FLUSHER.wire(self.senders)
        self.clock = clock  # one notion of "now" for deadlines, in tests too
        self.graphs = Graphs(store)
        # The Runner owns the store: it builds the runs and receipts on its handle; the notifier
        # (whose rows are owed inside the runs' transitions) and the inbox get its tables.
        notifier = Notifier(store.tables, self.graphs.views, self.graphs.amount)  # notify, metrics
        committed = traces.noting(notifier.committed, lambda: self.decisions, clock)
        self.runs = RunStore(store.db, clock, notifier.on_transition, committed)
        self.inbox = inbox if inbox is not None else open_inbox(store.tables, clock)
        self.approvals = store.tables.approvals(clock)
        self.leases = leases = Leases(self.runs.renew, lambda: lease_seconds() / 3)
        self.segments = Segments(
            self.graphs, self.runs, self.inbox, Receipts(store.db), leases, clock
        )
        self.decisions = Decisions(self.runs, self.approvals, self.graphs, clock)
        self.lifecycle = Lifecycle(
            self.segments, self.runs, self.graphs, self.inbox, clock, run_ids
        )
        self.sweeper = Sweeper(
            store, self.runs, self.inbox, self.decisions, self.lifecycle, clock, self.senders
        )
        # wakes this process's resumer (``worker.resumer``) about a queued claim: set by the app
        # and ``recover --forever``; None where the caller takes and resumes the claimed run
        # itself (``resume_claimed``: serverless, the one-shot sweep, the command line, tests)
        self.resumer: Callable[[Run], None] | None = None

    # what entry points, the API and tests call most, forwarded

    def start(self, text: str, **kwargs: Any) -> Outcome:
        with traces.starting(kwargs.get("workflow", "refund")):
            return self.lifecycle.start(text, **kwargs)

    def decide(
        self, decision: Decision, *, within: Within | None = None, run: Run | None = None
    ) -> Result:
        """The one decision path; it ends with an applied decision's claim committed (queued),
        and the :attr:`resumer`, if any, woken at once, before the source renders anything
        that could fail. ``run``: the row the source just read (``Decisions.decide``)."""
        result = self.decisions.decide(decision, within=within, run=run)
        if isinstance(result, Applied) and self.resumer is not None:
            self.hand_off(result.run)
        if isinstance(result, Pending) and not result.questions:  # a quorum still short
            self.tell_progress(decision.thread_id, result)
        return result

    def tell_progress(self, thread_id: str, pending: Pending) -> None:
        """Slack's message and the e-mails, for every later approver: who approved so far
        and, once a reviewer changed the proposal, its new total and whom it now needs."""
        run = self.runs.get(thread_id)
        if run is not None:
            g, p = self.graphs, pending
            tell(self.store.tables, run, p.approvers, p.quorum, g.views, self.needs, g.amount)

    def hand_off(self, claimed: Run) -> None:
        """Wake the :attr:`resumer` about ``claimed``, already queued by its claim's commit. A
        wake-up that fails loses nothing: the resumers' poll finds the row."""
        resumer = self.resumer
        if resumer is not None:
            shielded("handoff.queued", lambda: resumer(claimed))

    def resume(self, thread_id: str, owner: str, claimed: Run | None = None) -> Outcome:
        return self.lifecycle.resume(thread_id, owner, claimed)

    def resume_claimed(self, claimed: Run) -> Outcome:
        return self.lifecycle.resume_claimed(claimed)

    def cancel(self, thread_id: str, reason: str | None = None, actor: str = "operator") -> str:
        return self.lifecycle.cancel(thread_id, reason, actor)

    def retry(self, thread_id: str) -> Outcome:
        """Retry a failed run now; with a :attr:`resumer` (the app's), the retry is claimed here
        and resumed by it, as a decision is: the answer says ``running``/``resuming``."""
        if self.resumer is None:
            return self.lifecycle.retry(thread_id)
        claimed = self.lifecycle.claim_retry(thread_id)
        if claimed is None:
            return outcome_of(self.segments.current(thread_id))
        self.hand_off(claimed)
        return outcome_of(claimed)

    def take_over(self, thread_id: str, actor: str = "operator") -> Outcome | None:
        """Take over one stuck run (lease expired) and carry it on, through the
        :attr:`resumer` if there is one; None if it is not stuck (still leased, or ended)."""
        taken = self.lifecycle.take_over(thread_id, actor)
        if taken is None:
            return None
        if self.resumer is None:
            return self.resume_claimed(taken)
        self.hand_off(taken)
        return outcome_of(taken)

    def sweep(self) -> list[Outcome]:
        return self.sweeper.sweep()

    def recovery_pass(self, *, retry_failed: bool = False) -> list[Outcome]:
        return self.sweeper.recovery_pass(retry_failed=retry_failed)

    def hand_back(self) -> list[str]:
        rows = self.store.tables.leases()
        held = self.leases.hand_back(rows.release)
        return sorted({*held, *rows.release_ours()})

    def graph(self, name: str) -> Any:
        return self.graphs.graph(name)

    def args_schemas(self, name: str) -> dict[str, dict[str, Any]]:
        return self.graphs.args_schemas(name)

    def needs(self, run: Run, request: HitlRequest | None = None) -> str | None:
        return self.decisions.needs(run, request)


@contextmanager
def open_runner() -> Iterator[Runner]:
    with open_store() as store:
        runner = Runner(store, senders=channels.senders())
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
