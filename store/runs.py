"""The ``runs`` state machine: every transition is one conditional UPDATE plus an audit event.

A transition names the status it expects and returns the new row, or None when another process
won or the event is stale (the caller then does nothing). That single rule is what lets webhook
replicas, sweepers and CLI commands race safely on SQLite and Postgres alike.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from core import exactjson, settings
from core.faults import shielded
from core.hitl import HitlRequest
from core.identity import identity_key
from store import runs_sql as q
from store.audit import head_of, with_head
from store.claimed import HANDOFF, notify
from store.db import Database, Tx
from store.ratelimits import hold_quota
from store.run_reads import RunReads
from store.states import Event, Run, Status
from store.trail import event as _event


def lease_seconds() -> float:
    return settings.LEASE_SECONDS.get()


def new_owner(role: str) -> str:
    """An id for this process's claims, readable in the audit trail."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# Called inside a transition's transaction with the new row, the event's reason and detail:
# whatever it writes (notifications owed) commits or rolls back with the transition.
# (tx, the new row, reason, detail, when it happened: the transition's own clock reading)
OnTransition = Callable[[Tx, Run, str, Any, float], None]
# Called once the transition has committed, with the new row and the reason (sends what it owed).
AfterCommit = Callable[[Run, str], None]
# A caller's own writes, made inside a transition's transaction when it wins (a webhook's
# delivery id with the claim it caused: one commit, and never one without the other).
Within = Callable[[Tx], object]


class RunStore(RunReads):
    """Named transitions over the ``runs`` table; each returns the new row if this caller won."""

    def __init__(
        self,
        db: Database,
        clock: Callable[[], float] = time.time,
        on_transition: OnTransition | None = None,
        after_commit: AfterCommit | None = None,
    ):
        super().__init__(db, clock)
        self.on_transition = on_transition
        self.after_commit = after_commit

    def _transition(
        self,
        sql: str,
        params: dict[str, Any],
        *,
        thread_id: str,
        actor: str,
        from_status: str | None,
        to_status: str | None,
        reason: str,
        detail: Any = None,
        close: dict[str, Any] | None = None,
        within: Within | None = None,
        guard: Within | None = None,
    ) -> Run | None:
        """``close``: the local inbox's copy of the request ends with this transition (its
        status, decisions, decided_by), in the same transaction; ``guard`` runs first in it
        and may refuse by raising; ``within`` writes the caller's own rows in it too (only if
        the transition won)."""
        now = self.clock()
        with self.db.transaction() as tx:
            if guard is not None:
                guard(tx)
            row = tx.returning(with_head(tx, sql), {**params, "thread_id": thread_id, "now": now})
            if row is None:
                return None
            head = head_of(row)
            _event(tx, thread_id, now, actor, from_status, to_status, reason, detail, head)
            run = Run.from_row(row)
            notify(tx, run)  # a claim queued for the resumers wakes them once it commits
            if close is not None and run.interrupt_id:
                shut = {"decisions": None, "decided_by": None, **close, "now": now}
                tx.execute(q.CLOSE_INBOX_REQUEST, {**shut, "interrupt_id": run.interrupt_id})
            if within is not None:
                within(tx)
            if self.on_transition is not None:
                self.on_transition(tx, run, reason, detail, now)
        if self.after_commit is not None:  # a count or a flush never strands the run
            shielded("transition.committed", functools.partial(self.after_commit, run, reason))
        return run

    def create(
        self,
        thread_id: str,
        workflow: str,
        input_: Any,
        owner: str,
        *,
        expires_in: float | None = None,
        requested_by: str | None = None,
        quota: int | None = None,
    ) -> Run | None:
        """Insert a new run as ``running`` owned by ``owner``; None if the id is taken.

        ``expires_in`` overrides the policy's approval window for every pause of this run;
        ``quota``: raise ``OverQuota`` if ``requested_by`` has that many open runs already."""
        guard = None
        if quota and requested_by is not None:
            guard = functools.partial(
                hold_quota, requested_by=requested_by, quota=quota, thread_id=thread_id
            )
        return self._transition(
            q.INSERT_RUN,
            {
                "workflow": workflow,
                "input": json.dumps(input_),
                "owner": owner,
                "lease_until": self.clock() + lease_seconds(),
                "expires_in": expires_in,
                "requested_by": requested_by,
                "requester_key": None if requested_by is None else identity_key(requested_by),
            },
            thread_id=thread_id,
            actor=owner,
            from_status=None,
            to_status=Status.RUNNING,
            reason=Event.STARTED,
            detail={
                "workflow": workflow,
                "expires_in": expires_in,
                "requested_by": requested_by,
                "input": input_,
            },
            guard=guard,
        )

    def mark_waiting(
        self,
        thread_id: str,
        owner: str,
        from_status: str,
        interrupt_id: str,
        graph_interrupt_ids: list[str],
        request: HitlRequest,
        *,
        shown: list[dict[str, Any]],
        expires_at: float | None = None,
        quorum: int = 1,
        separation: bool = False,
        request_digest: str | None = None,
        ladder_at: float | None = None,
        authority: list[dict[str, Any]] | None = None,
        approver_groups: str | None = None,
    ) -> Run | None:
        return self._transition(
            q.MARK_WAITING,
            {
                "owner": owner,
                "from_status": from_status,
                "interrupt_id": interrupt_id,
                "graph_interrupt_ids": json.dumps(graph_interrupt_ids),
                "request": json.dumps(request.to_json()),
                "expires_at": expires_at,
                "quorum": quorum,
                "separation": int(separation),
                "request_digest": request_digest,
                "ladder_at": ladder_at,
                "authority": None if authority is None else json.dumps(authority),
                "approver_groups": approver_groups,
            },
            thread_id=thread_id,
            actor=owner,
            from_status=from_status,
            to_status=Status.WAITING,
            reason=Event.PAUSED,
            detail={
                "interrupt_id": interrupt_id,
                "action_requests": shown,
                "expires_at": expires_at,
                "quorum": quorum,
                "separation": separation,
                **({"authority": authority} if authority is not None else {}),
            },
        )

    def claim(
        self,
        thread_id: str,
        interrupt_id: str,
        decision: Any,
        owner: str,
        *,
        decided: list[Any],
        approvers: list[str] | None = None,
        source: str = "",
        within: Within | None = None,
    ) -> Run | None:
        """The one place a waiting run is taken: only if it still waits on ``interrupt_id``
        and its deadline has not passed. ``approvers`` are recorded with it, one per person.

        The claim is the resume queue's entry (``store.claimed``): no lease, a hand-off's
        owner, and on Postgres a ``NOTIFY`` in its transaction, so a resumer takes it at once.
        ``decision`` is the resume value; ``decided``, its decisions for the inbox's copy;
        ``within``, the caller's writes committed with the claim."""
        approvers = approvers or []
        return self._transition(
            q.CLAIM,
            {
                "interrupt_id": interrupt_id,
                "decision": exactjson.dumps(decision),
                "owner": f"{HANDOFF}{owner}",
                "lease_until": 0.0,
            },
            thread_id=thread_id,
            actor=owner,
            from_status=Status.WAITING,
            to_status=Status.RESUMING,
            reason=Event.CLAIMED,
            detail={
                "interrupt_id": interrupt_id,
                "decision": decision,
                "approvers": approvers,
                "source": source,
            },
            close={
                "request_status": "answered",
                "decisions": exactjson.dumps(decided),
                "decided_by": ", ".join(approvers) or None,
            },
            within=within,
        )

    def expire(self, thread_id: str, interrupt_id: str, actor: str, result: str) -> Run | None:
        """waiting -> expired, only if the deadline has passed and nobody claimed it first."""
        return self._transition(
            q.EXPIRE,
            {"interrupt_id": interrupt_id, "result": result},
            thread_id=thread_id,
            actor=actor,
            from_status=Status.WAITING,
            to_status=Status.EXPIRED,
            reason=Event.EXPIRED,
            detail={
                "interrupt_id": interrupt_id,
                "outcome": {"type": "reject", "message": "expired"},
            },
            close={"request_status": Status.EXPIRED},
        )

    def cancel_now(
        self, thread_id: str, from_status: str, actor: str, reason: str, result: str
    ) -> Run | None:
        """waiting/failed -> cancelled: nobody is executing it, so it ends here."""
        return self._transition(
            q.CANCEL_NOW,
            {"from_status": from_status, "reason": reason, "result": result},
            thread_id=thread_id,
            actor=actor,
            from_status=from_status,
            to_status=Status.CANCELLED,
            reason=Event.CANCELLED,
            detail={"reason": reason},
            close={"request_status": Status.CANCELLED},
        )

    def request_cancel(self, thread_id: str, actor: str, reason: str) -> Run | None:
        """Leave a cancel intent on a running/resuming run for its runner to honour."""
        return self._transition(
            q.REQUEST_CANCEL,
            {"reason": reason},
            thread_id=thread_id,
            actor=actor,
            from_status=None,
            to_status=None,
            reason=Event.CANCEL_REQUESTED,
            detail={"reason": reason},
        )

    def mark_cancelled(
        self, thread_id: str, owner: str, from_status: str, result: str
    ) -> Run | None:
        return self._end(q.MARK_CANCELLED, thread_id, owner, from_status, Status.CANCELLED,
                         Event.CANCELLED, result=result)  # fmt: skip

    def rearm_ladder(self, thread_id: str, interrupt_id: str, ladder_at: float | None) -> None:
        params = {"thread_id": thread_id, "interrupt_id": interrupt_id, "ladder_at": ladder_at}
        self.db.execute(q.REARM_LADDER, params)

    def ladder_step(
        self,
        thread_id: str,
        interrupt_id: str,
        step: int,
        actor: str,
        detail: dict[str, Any],
        ladder_at: float | None,
    ) -> Run | None:
        reason = Event.REMINDER if step == 1 else Event.ESCALATED
        return self._transition(
            q.LADDER_STEP,
            {"interrupt_id": interrupt_id, "step": step, "ladder_at": ladder_at},
            thread_id=thread_id,
            actor=actor,
            from_status=None,
            to_status=None,
            reason=reason,
            detail={"interrupt_id": interrupt_id, **detail},
        )

    def mark_done(self, thread_id: str, owner: str, from_status: str, result: str) -> Run | None:
        return self._end(q.MARK_DONE, thread_id, owner, from_status, Status.DONE, Event.FINISHED,
                         result=result)  # fmt: skip

    def mark_failed(self, thread_id: str, owner: str, from_status: str, error: str) -> Run | None:
        return self._end(q.MARK_FAILED, thread_id, owner, from_status, Status.FAILED,
                         Event.FAILED, error=error)  # fmt: skip

    # fmt: off
    def _end(self, sql: str, thread_id: str, owner: str, from_status: str, to: str, reason: str,
             **detail: str) -> Run | None:
        # fmt: on
        """A run's owner ends it (done, failed, cancelled) with its result or error."""
        return self._transition(sql, {"owner": owner, "from_status": from_status, **detail},
                                thread_id=thread_id, actor=owner, from_status=from_status,
                                to_status=to, reason=reason, detail=detail)  # fmt: skip

    def renew(self, thread_id: str, owner: str) -> bool:
        """Push the lease out while a segment runs; False means the lease was lost."""
        params = {
            "thread_id": thread_id,
            "owner": owner,
            "lease_until": self.clock() + lease_seconds(),
        }
        return self.db.execute(q.RENEW_LEASE, params) == 1

    def reclaim(
        self, thread_id: str, from_status: str, old_owner: str, owner: str, queue: bool = False
    ) -> Run | None:
        """Take over a row whose lease ran out (its process died), or a queued claim; ``queue``:
        leave it queued for a resumer (``store.claimed``) instead of leased to ``owner``."""
        handoff = old_owner.startswith(HANDOFF)
        return self._transition(
            q.TAKE_UP if handoff else q.RECLAIM,
            {
                "from_status": from_status,
                "old_owner": old_owner,
                "owner": f"{HANDOFF}{owner}" if queue else owner,
                "lease_until": 0.0 if queue else self.clock() + lease_seconds(),
            },
            thread_id=thread_id,
            actor=owner,
            from_status=from_status,
            to_status=from_status,
            reason=Event.TAKEN_UP if handoff else Event.RECLAIMED,
            detail={"previous_owner": old_owner},
        )

    def retry(self, thread_id: str, attempts: int, to_status: str, owner: str) -> Run | None:
        """failed -> running/resuming, only if nobody retried it since ``attempts`` was read;
        queued for a resumer, as a claim is."""
        return self._transition(
            q.RETRY,
            {"attempts": attempts, "to_status": to_status, "owner": f"{HANDOFF}{owner}",
             "lease_until": 0.0},  # fmt: skip
            thread_id=thread_id,
            actor=owner,
            from_status=Status.FAILED,
            to_status=to_status,
            reason=Event.RETRY,
            detail={"attempt": attempts + 1},
        )

    def record(self, thread_id: str, actor: str, reason: str, detail: Any = None) -> None:
        """An audit event that is not a transition (a delivery seen, an event ignored)."""
        with self.db.transaction() as tx:
            _event(tx, thread_id, self.clock(), actor, None, None, reason, detail)
