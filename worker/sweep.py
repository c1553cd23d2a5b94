"""The recovery sweep: what ``recover.py`` (or a scheduled function) does in one pass.

In order: owed webhooks, runs of dead processes (expired leases), answered approvals, the
escalation ladder, overdue approvals (the safe default: rejected as expired), if asked failed
runs due for a retry, then one bounded step of retention. Every step is a conditional
transition, so any number of sweepers may run at once: a lost claim is skipped silently.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from core import settings, shutdown
from core.errors import UserError, one_line
from core.faults import fault
from inbox.base import Approval, Inbox
from inbox.local import LocalInbox
from inbox.outbox import FLUSHER, WEBHOOKS_ONLY, Outbox, Senders
from ops import metrics
from store.db import Store
from store.run_reads import LadderRun, LapsedRun, OverdueRun, WaitingRun
from store.runs import RunStore, new_owner
from store.states import Event, Status
from worker.audit import anchor_due
from worker.decisions import Applied, Decision, Decisions, Source
from worker.lifecycle import Lifecycle
from worker.outcome import Note, Outcome
from worker.policy import ladder_points, next_ladder_at
from worker.segment import is_transient

log = logging.getLogger(__name__)
T = TypeVar("T")


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


class Sweeper:
    def __init__(
        self,
        store: Store,
        runs: RunStore,
        inbox: Inbox,
        decisions: Decisions,
        lifecycle: Lifecycle,
        clock: Callable[[], float],
        senders: Senders = WEBHOOKS_ONLY,
    ):
        self.senders = senders
        self.store = store
        self.runs = runs
        self.inbox = inbox
        self.decisions = decisions
        self.lifecycle = lifecycle
        self.clock = clock

    def _safely(self, thread_id: str, step: Callable[[], T]) -> T | None:
        """One row's step; a row that cannot be handled is recorded and skipped, so the rest of
        the sweep goes on. A database outage still stops the sweep (every row would fail). A
        stopping process (SIGTERM) takes no further row: another process will."""
        if shutdown.requested():
            return None
        try:
            return step()
        except Exception as exc:  # noqa: BLE001 - recorded below, or re-raised if transient
            if is_transient(exc):
                raise
            error = one_line(exc)
            log.error("sweep skipped %s: %s", thread_id, error)
            try:
                self.runs.record(thread_id, "recover", Event.ROW_SKIPPED, {"error": error})
            except Exception as record_exc:  # noqa: BLE001 - the log line above says it
                log.error("could not record the skip of %s: %s", thread_id, one_line(record_exc))
            return None

    def sweep(self) -> list[Outcome]:
        """Runs of dead processes, then answered approvals, then the ladder and expiry."""
        outcomes = self.recover_expired()
        waiting = self._answerable()
        approvals = self.inbox.get_many([r.interrupt_id for r in waiting])
        for row in waiting:
            approval = approvals.get(row.interrupt_id)
            if approval is not None and approval.answered:
                resumed = self._safely(row.thread_id, partial(self._apply, row, approval))
                if resumed is not None:
                    outcomes.append(resumed)
        # after the claims: an answer already in the inbox wins over a deadline passing now
        return outcomes + self.climb_ladder() + self.expire_overdue()

    def _answerable(self) -> list[WaitingRun]:
        """The waiting runs whose approval may be answered in the inbox: another inbox is asked
        about every waiting run; the local one decides through the decision path, so only a
        request answered before that path existed can be left (one indexed join)."""
        if isinstance(self.inbox, LocalInbox) and self.inbox.beside(self.store):
            return self.runs.waiting_answered_locally()
        return self.runs.waiting()

    @staticmethod
    def decision_of(thread_id: str, approval: Approval) -> Decision:
        """The sweep as a source: an inbox's answer, as the decision of the people it names."""
        return Decision.read(
            approval.decisions or [],
            thread_id=thread_id,
            interrupt_id=approval.id,
            approvers=approval.approvers,
            source=Source.SWEEP,
            digest=approval.digest,
        )

    def _apply(self, row: WaitingRun, approval: Approval) -> Outcome | None:
        result = self.decisions.decide(self.decision_of(row.thread_id, approval))
        if not isinstance(result, Applied):
            return None
        fault("after-claim")  # the claim is queued: a resumer elsewhere may take it first
        return self.lifecycle.resume_claimed(result.run, "recover")

    def recover_expired(self) -> list[Outcome]:
        """Take over ``running``/``resuming`` rows whose lease ran out, and finish them."""
        outcomes = []
        for row in self.runs.expired():
            outcome = self._safely(row.thread_id, partial(self._reclaim, row))
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def _reclaim(self, row: LapsedRun) -> Outcome | None:
        owner = new_owner("recover")
        reclaimed = self.runs.reclaim(row.thread_id, row.status, row.owner, owner)
        if reclaimed is not None:
            fault("after-claim")  # a hand-off taken up is this process's claim now
            return self.lifecycle.resume(row.thread_id, owner, reclaimed)
        return None

    def climb_ladder(self) -> list[Outcome]:
        """Remind, then escalate, each waiting approval at its points of the window; the
        conditional UPDATE on the run's step makes each step happen once, whoever sweeps."""
        now = self.clock()
        actor = new_owner("recover")
        outcomes: list[Outcome] = []
        for row in self.runs.ladder_candidates():
            climbed = self._safely(row.thread_id, partial(self._climb, row, now, actor))
            outcomes += climbed or []
        return outcomes

    def _climb(self, row: LadderRun, now: float, actor: str) -> list[Outcome]:
        """The steps due under the current points; a row listed by a point stored under other
        settings, with nothing due now, is re-armed for its next one."""
        remind_at, escalate_at = ladder_points()
        start, end = row.updated_at, row.expires_at
        due = next_ladder_at(start, end, row.ladder_step)
        if due is None or now < due:
            self.runs.rearm_ladder(row.thread_id, row.interrupt_id, due)
            return []
        outcomes = []
        for step, point in ((1, remind_at), (2, escalate_at)):
            if not point or row.ladder_step >= step or now < start + point * (end - start):
                continue
            detail = {"expires_at": end, "point": point}
            after = next_ladder_at(start, end, step)
            if not self.runs.ladder_step(
                row.thread_id, row.interrupt_id, step, actor, detail, after
            ):
                continue
            note = Note.REMINDED if step == 1 else Note.ESCALATED
            self.inbox.mark_ladder(row.interrupt_id, note)
            text = f"{note}: approval {row.interrupt_id} expires at {_stamp(end)}"
            outcomes.append(Outcome(row.thread_id, Status.WAITING, result=text, note=note))
        return outcomes

    def expire_overdue(self) -> list[Outcome]:
        """Give every overdue approval the safe default outcome (reject, reason "expired").

        Nothing of the run executes: the graph is not resumed, so a gated action never runs.
        The conditional UPDATE makes it once per run however many sweepers race."""
        outcomes = []
        actor = new_owner("recover")
        for row in self.runs.overdue():
            outcome = self._safely(row.thread_id, partial(self._expire, row, actor))
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def _expire(self, row: OverdueRun, actor: str) -> Outcome | None:
        result = (
            f"The approval expired at {_stamp(row.expires_at)} with no decision, so it was "
            'rejected (reason "expired") and nothing was done.'
        )
        if not self.runs.expire(row.thread_id, row.interrupt_id, actor, result):
            return None
        self.lifecycle.close_request(row.thread_id, row.interrupt_id, Status.EXPIRED, actor)
        return Outcome(row.thread_id, Status.EXPIRED, result=result)

    def retry_failed(self) -> list[Outcome]:
        """Retry failed runs whose backoff has passed, up to ``RETRY_MAX_ATTEMPTS`` attempts."""
        max_attempts = settings.RETRY_MAX_ATTEMPTS.get()
        base = settings.RETRY_BASE_SECONDS.get()
        now = self.clock()
        outcomes = []
        for row in self.runs.failed():
            if row.attempts >= max_attempts:
                continue
            if now < row.updated_at + base * 2 ** max(0, row.attempts - 1):
                continue
            retry = partial(self.lifecycle.retry_attempt, row.thread_id, row.attempts, row.decision)
            outcome = self._safely(row.thread_id, retry)
            if outcome:
                outcomes.append(outcome)
        return outcomes

    def flush_outbox(self) -> None:
        """Send the local inbox's owed webhooks, so a delivery lost to downtime still lands."""
        # this process's own sends first (a slow lane's rows are taken: it keeps them)
        lanes = self.senders.lanes()
        FLUSHER.wait(lanes=[lane for lane in lanes if lane not in self.senders.slow])
        outbox = Outbox(self.store.tables, senders=self.senders)
        for lane in lanes:  # lane by lane, the slow last: mail holds back no webhook
            try:
                outbox.deliver_due(lane=lane)  # each attempt counted by ops.metrics
            except UserError as exc:  # polling still resumes the runs; say why webhooks wait
                log.warning("webhook delivery skipped: %s", exc)

    def recovery_pass(self, *, retry_failed: bool = False) -> list[Outcome]:
        """One ``recover.py`` sweep, in order: owed webhooks, dead processes' runs, answered
        approvals, the ladder and expiry, (if asked) failed runs due for a retry, retention, and
        an audit anchor when one is due."""
        with metrics.timed("sweep"):
            return self._pass(retry_failed)

    def _pass(self, retry_failed: bool) -> list[Outcome]:
        self.flush_outbox()
        self.store.tables.deliveries(self.clock).forget_old()
        outcomes = self.sweep()
        if retry_failed:
            outcomes += self.retry_failed()
        self.prune_step()
        anchor_due(self.store.tables.audit(), self.clock())
        return outcomes

    def prune_step(self) -> None:
        """One bounded step of retention (``ops.retention``): finished runs' checkpoints, then
        their rows once the audit period has passed."""
        from ops.retention import prune

        try:
            pruned = prune(self.store, self.clock)
        except Exception as exc:  # noqa: BLE001 - retention waits; the sweep's outcomes stand
            log.warning("pruning skipped: %s", one_line(exc))
            return
        if pruned:
            log.info("%s", pruned.line())
