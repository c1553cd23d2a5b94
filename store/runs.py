"""The ``runs`` state machine: every transition is one conditional UPDATE plus an audit event.

A transition names the status it expects; a rowcount of 0 means another process won or the event
is stale, and the caller must do nothing. That single rule is what lets webhook replicas, sweepers
and CLI commands race safely on SQLite and Postgres alike.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

from store.db import Database, Tx

RUNNING, WAITING, RESUMING, DONE, FAILED = "running", "waiting", "resuming", "done", "failed"
CANCELLED, EXPIRED = "cancelled", "expired"
ACTIVE = (RUNNING, RESUMING)

INSERT_RUN = """
INSERT INTO runs (thread_id, workflow, status, input, owner, lease_until, attempts,
                  created_at, updated_at, expires_in, requested_by)
VALUES (:thread_id, :workflow, 'running', :input, :owner, :lease_until, 1, :now, :now,
        :expires_in, :requested_by)
ON CONFLICT (thread_id) DO NOTHING
"""

MARK_WAITING = """
UPDATE runs SET status = 'waiting', interrupt_id = :interrupt_id,
       graph_interrupt_ids = :graph_interrupt_ids, request = :request, decision = NULL,
       owner = NULL, lease_until = NULL, updated_at = :now, expires_at = :expires_at,
       quorum = :quorum, ladder_step = 0
WHERE thread_id = :thread_id AND status = :from_status AND owner = :owner
"""

CLAIM = """
UPDATE runs SET status = 'resuming', decision = :decision, owner = :owner,
       lease_until = :lease_until, attempts = attempts + 1, updated_at = :now
WHERE thread_id = :thread_id AND status = 'waiting' AND interrupt_id = :interrupt_id
  AND (expires_at IS NULL OR expires_at > :now)
"""

# The deadline passed with no claimed decision: the safe default outcome, once, whoever sweeps.
EXPIRE = """
UPDATE runs SET status = 'expired', result = :result, owner = NULL, lease_until = NULL,
       updated_at = :now
WHERE thread_id = :thread_id AND status = 'waiting' AND interrupt_id = :interrupt_id
  AND expires_at <= :now
"""

# Reminder (step 1) and escalation (step 2) before the deadline: each once per pause, by whoever
# sweeps first; a step never goes backwards, and a later step also covers a skipped earlier one.
LADDER_STEP = """
UPDATE runs SET ladder_step = :step
WHERE thread_id = :thread_id AND status = 'waiting' AND interrupt_id = :interrupt_id
  AND ladder_step < :step
"""

LIST_LADDER = """
SELECT thread_id, interrupt_id, updated_at, expires_at, ladder_step FROM runs
WHERE status = 'waiting' AND expires_at > :now AND ladder_step < 2
ORDER BY expires_at, thread_id
"""

LIST_OVERDUE = """
SELECT thread_id, interrupt_id, expires_at FROM runs
WHERE status = 'waiting' AND expires_at <= :now
ORDER BY expires_at, thread_id
"""

# A run nobody is executing ends at once; one being executed gets an intent its runner honours.
CANCEL_NOW = """
UPDATE runs SET status = 'cancelled', cancel_reason = :reason, result = :result, owner = NULL,
       lease_until = NULL, updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status
"""

REQUEST_CANCEL = """
UPDATE runs SET cancel_reason = :reason
WHERE thread_id = :thread_id AND status IN ('running', 'resuming') AND cancel_reason IS NULL
"""

MARK_CANCELLED = """
UPDATE runs SET status = 'cancelled', result = :result, owner = NULL, lease_until = NULL,
       updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status AND owner = :owner
"""

CANCEL_REASON = "SELECT cancel_reason FROM runs WHERE thread_id = :thread_id"

MARK_DONE = """
UPDATE runs SET status = 'done', result = :result, error = NULL, owner = NULL,
       lease_until = NULL, updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status AND owner = :owner
"""

MARK_FAILED = """
UPDATE runs SET status = 'failed', error = :error, owner = NULL, lease_until = NULL,
       updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status AND owner = :owner
"""

RENEW_LEASE = """
UPDATE runs SET lease_until = :lease_until
WHERE thread_id = :thread_id AND owner = :owner AND status IN ('running', 'resuming')
"""

# A lease that ran out belongs to a dead process; one sweeper takes it over, by the old owner.
RECLAIM = """
UPDATE runs SET owner = :owner, lease_until = :lease_until, attempts = attempts + 1,
       updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status AND owner = :old_owner
  AND lease_until < :now
"""

LIST_EXPIRED = """
SELECT thread_id, status, owner, lease_until FROM runs
WHERE status IN ('running', 'resuming') AND lease_until < :now
ORDER BY lease_until, thread_id
"""

RETRY = """
UPDATE runs SET status = :to_status, owner = :owner, lease_until = :lease_until,
       attempts = attempts + 1, error = NULL, updated_at = :now
WHERE thread_id = :thread_id AND status = 'failed' AND attempts = :attempts
"""

LIST_FAILED = """
SELECT thread_id, attempts, decision, updated_at FROM runs WHERE status = 'failed'
ORDER BY updated_at, thread_id
"""

COUNT_UNFINISHED = """
SELECT count(*) AS n FROM runs WHERE status IN ('waiting', 'running', 'resuming')
"""

GET_RUN = "SELECT * FROM runs WHERE thread_id = :thread_id"

LIST_WAITING = """
SELECT thread_id, interrupt_id, updated_at, expires_at, ladder_step FROM runs
WHERE status = 'waiting'
ORDER BY updated_at, thread_id
"""

ESCALATED = "event interrupt.escalated"  # the reason the webhook records such events under

# Escalations recorded since the run started waiting (its updated_at), i.e. of the current
# approval, not of an earlier pause on the same thread.
LIST_WAITING_WITH_ESCALATIONS = """
SELECT r.thread_id, r.interrupt_id, r.updated_at, r.expires_at, r.ladder_step,
       COUNT(e.id) AS escalations, MAX(e.at) AS escalated_at
FROM runs r
LEFT JOIN run_events e
       ON e.thread_id = r.thread_id AND e.reason = :escalated AND e.at >= r.updated_at
WHERE r.status = 'waiting'
GROUP BY r.thread_id, r.interrupt_id, r.updated_at, r.expires_at, r.ladder_step
ORDER BY r.updated_at, r.thread_id
"""

INSERT_EVENT = """
INSERT INTO run_events (thread_id, at, actor, from_status, to_status, reason, detail)
VALUES (:thread_id, :at, :actor, :from_status, :to_status, :reason, :detail)
"""

LIST_EVENTS = "SELECT * FROM run_events WHERE thread_id = :thread_id ORDER BY id"


def lease_seconds() -> float:
    return float(os.environ.get("LEASE_SECONDS", "300"))


def new_owner(role: str) -> str:
    """An id for this process's claims, readable in the audit trail."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class Run:
    thread_id: str
    workflow: str
    status: str
    input: Any
    interrupt_id: str | None
    graph_interrupt_ids: list[str]
    request: dict | None
    decision: Any
    result: str | None
    error: str | None
    owner: str | None
    lease_until: float | None
    attempts: int
    created_at: float
    updated_at: float
    expires_in: float | None = None
    expires_at: float | None = None
    cancel_reason: str | None = None
    requested_by: str | None = None
    quorum: int | None = None
    ladder_step: int = 0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Run:
        def load(value):
            return None if value is None else json.loads(value)

        return cls(
            thread_id=row["thread_id"],
            workflow=row["workflow"],
            status=row["status"],
            input=load(row["input"]),
            interrupt_id=row["interrupt_id"],
            graph_interrupt_ids=load(row["graph_interrupt_ids"]) or [],
            request=load(row["request"]),
            decision=load(row["decision"]),
            result=row["result"],
            error=row["error"],
            owner=row["owner"],
            lease_until=row["lease_until"],
            attempts=row["attempts"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            expires_in=row.get("expires_in"),
            expires_at=row.get("expires_at"),
            cancel_reason=row.get("cancel_reason"),
            requested_by=row.get("requested_by"),
            quorum=row.get("quorum"),
            ladder_step=row.get("ladder_step") or 0,
        )


class RunStore:
    """Named transitions over the ``runs`` table; each returns whether this caller won."""

    def __init__(self, db: Database, clock=time.time):
        self.db = db
        self.clock = clock

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
    ) -> bool:
        now = self.clock()
        with self.db.transaction() as tx:
            if tx.execute(sql, {**params, "thread_id": thread_id, "now": now}) != 1:
                return False
            _event(tx, thread_id, now, actor, from_status, to_status, reason, detail)
        return True

    def create(
        self,
        thread_id: str,
        workflow: str,
        input_: Any,
        owner: str,
        *,
        expires_in: float | None = None,
        requested_by: str | None = None,
    ) -> bool:
        """Insert a new run as ``running`` owned by ``owner``; False if the id is taken.

        ``expires_in`` overrides the policy's approval window for every pause of this run."""
        return self._transition(
            INSERT_RUN,
            {
                "workflow": workflow,
                "input": json.dumps(input_),
                "owner": owner,
                "lease_until": self.clock() + lease_seconds(),
                "expires_in": expires_in,
                "requested_by": requested_by,
            },
            thread_id=thread_id,
            actor=owner,
            from_status=None,
            to_status=RUNNING,
            reason="started",
            detail={
                "workflow": workflow,
                "expires_in": expires_in,
                "requested_by": requested_by,
                "input": input_,
            },
        )

    def mark_waiting(
        self,
        thread_id: str,
        owner: str,
        from_status: str,
        interrupt_id: str,
        graph_interrupt_ids: list[str],
        request: dict,
        *,
        expires_at: float | None = None,
        quorum: int = 1,
    ) -> bool:
        return self._transition(
            MARK_WAITING,
            {
                "owner": owner,
                "from_status": from_status,
                "interrupt_id": interrupt_id,
                "graph_interrupt_ids": json.dumps(graph_interrupt_ids),
                "request": json.dumps(request),
                "expires_at": expires_at,
                "quorum": quorum,
            },
            thread_id=thread_id,
            actor=owner,
            from_status=from_status,
            to_status=WAITING,
            reason="paused for approval",
            detail={
                "interrupt_id": interrupt_id,
                "action_requests": request["action_requests"],
                "expires_at": expires_at,
                "quorum": quorum,
            },
        )

    def claim(
        self,
        thread_id: str,
        interrupt_id: str,
        decision: Any,
        owner: str,
        *,
        decided_by: str | None = None,
    ) -> bool:
        """The one place a waiting run is taken: only if it still waits on ``interrupt_id``."""
        return self._transition(
            CLAIM,
            {
                "interrupt_id": interrupt_id,
                "decision": json.dumps(decision),
                "owner": owner,
                "lease_until": self.clock() + lease_seconds(),
            },
            thread_id=thread_id,
            actor=owner,
            from_status=WAITING,
            to_status=RESUMING,
            reason="decision claimed",
            detail={"interrupt_id": interrupt_id, "decision": decision, "decided_by": decided_by},
        )

    def expire(self, thread_id: str, interrupt_id: str, actor: str, result: str) -> bool:
        """waiting -> expired, only if the deadline has passed and nobody claimed it first."""
        return self._transition(
            EXPIRE,
            {"interrupt_id": interrupt_id, "result": result},
            thread_id=thread_id,
            actor=actor,
            from_status=WAITING,
            to_status=EXPIRED,
            reason="expired",
            detail={
                "interrupt_id": interrupt_id,
                "outcome": {"type": "reject", "message": "expired"},
            },
        )

    def cancel_now(
        self, thread_id: str, from_status: str, actor: str, reason: str, result: str
    ) -> bool:
        """waiting/failed -> cancelled: nobody is executing it, so it ends here."""
        return self._transition(
            CANCEL_NOW,
            {"from_status": from_status, "reason": reason, "result": result},
            thread_id=thread_id,
            actor=actor,
            from_status=from_status,
            to_status=CANCELLED,
            reason="cancelled",
            detail={"reason": reason},
        )

    def request_cancel(self, thread_id: str, actor: str, reason: str) -> bool:
        """Leave a cancel intent on a running/resuming run for its runner to honour."""
        return self._transition(
            REQUEST_CANCEL,
            {"reason": reason},
            thread_id=thread_id,
            actor=actor,
            from_status=None,
            to_status=None,
            reason="cancel requested",
            detail={"reason": reason},
        )

    def cancel_requested(self, thread_id: str) -> str | None:
        row = self.db.one(CANCEL_REASON, {"thread_id": thread_id})
        return None if row is None else row["cancel_reason"]

    def mark_cancelled(self, thread_id: str, owner: str, from_status: str, result: str) -> bool:
        return self._transition(
            MARK_CANCELLED,
            {"owner": owner, "from_status": from_status, "result": result},
            thread_id=thread_id,
            actor=owner,
            from_status=from_status,
            to_status=CANCELLED,
            reason="cancelled",
            detail={"result": result},
        )

    def ladder_candidates(self) -> list[dict[str, Any]]:
        """Waiting runs before their deadline whose reminder or escalation is still to come
        (an overdue one is expired instead, not reminded)."""
        return self.db.all(LIST_LADDER, {"now": self.clock()})

    def ladder_step(
        self, thread_id: str, interrupt_id: str, step: int, actor: str, detail: dict
    ) -> bool:
        reason = "reminder" if step == 1 else "escalated"
        return self._transition(
            LADDER_STEP,
            {"interrupt_id": interrupt_id, "step": step},
            thread_id=thread_id,
            actor=actor,
            from_status=None,
            to_status=None,
            reason=reason,
            detail={"interrupt_id": interrupt_id, **detail},
        )

    def overdue(self) -> list[dict[str, Any]]:
        """Waiting runs whose approval deadline has passed, most overdue first."""
        return self.db.all(LIST_OVERDUE, {"now": self.clock()})

    def mark_done(self, thread_id: str, owner: str, from_status: str, result: str) -> bool:
        return self._transition(
            MARK_DONE,
            {"owner": owner, "from_status": from_status, "result": result},
            thread_id=thread_id,
            actor=owner,
            from_status=from_status,
            to_status=DONE,
            reason="finished",
            detail={"result": result},
        )

    def mark_failed(self, thread_id: str, owner: str, from_status: str, error: str) -> bool:
        return self._transition(
            MARK_FAILED,
            {"owner": owner, "from_status": from_status, "error": error},
            thread_id=thread_id,
            actor=owner,
            from_status=from_status,
            to_status=FAILED,
            reason="failed",
            detail={"error": error},
        )

    def renew(self, thread_id: str, owner: str) -> bool:
        """Push the lease out while a segment runs; False means the lease was lost."""
        params = {
            "thread_id": thread_id,
            "owner": owner,
            "lease_until": self.clock() + lease_seconds(),
        }
        return self.db.execute(RENEW_LEASE, params) == 1

    def reclaim(self, thread_id: str, from_status: str, old_owner: str, owner: str) -> bool:
        return self._transition(
            RECLAIM,
            {
                "from_status": from_status,
                "old_owner": old_owner,
                "owner": owner,
                "lease_until": self.clock() + lease_seconds(),
            },
            thread_id=thread_id,
            actor=owner,
            from_status=from_status,
            to_status=from_status,
            reason="lease expired, reclaimed",
            detail={"previous_owner": old_owner},
        )

    def retry(self, thread_id: str, attempts: int, to_status: str, owner: str) -> bool:
        """failed -> running/resuming, only if nobody retried it since ``attempts`` was read."""
        return self._transition(
            RETRY,
            {
                "attempts": attempts,
                "to_status": to_status,
                "owner": owner,
                "lease_until": self.clock() + lease_seconds(),
            },
            thread_id=thread_id,
            actor=owner,
            from_status=FAILED,
            to_status=to_status,
            reason="retry",
            detail={"attempt": attempts + 1},
        )

    def expired(self) -> list[dict[str, Any]]:
        return self.db.all(LIST_EXPIRED, {"now": self.clock()})

    def failed(self) -> list[dict[str, Any]]:
        return self.db.all(LIST_FAILED)

    def unfinished(self) -> int:
        """Runs still waiting, running or resuming."""
        return int(self.db.one(COUNT_UNFINISHED)["n"])

    def record(self, thread_id: str, actor: str, reason: str, detail: Any = None) -> None:
        """An audit event that is not a transition (a delivery seen, an event ignored)."""
        with self.db.transaction() as tx:
            _event(tx, thread_id, self.clock(), actor, None, None, reason, detail)

    def get(self, thread_id: str) -> Run | None:
        row = self.db.one(GET_RUN, {"thread_id": thread_id})
        return None if row is None else Run.from_row(row)

    def waiting(self) -> list[dict[str, Any]]:
        """``thread_id``, ``interrupt_id`` and ``updated_at`` of every waiting run, oldest first."""
        return self.db.all(LIST_WAITING)

    def waiting_with_escalations(self) -> list[dict[str, Any]]:
        """Like :meth:`waiting`, plus ``escalations`` (count) and ``escalated_at`` (latest, or
        None) for the approval each run waits on, so operators see which ones are overdue."""
        return self.db.all(LIST_WAITING_WITH_ESCALATIONS, {"escalated": ESCALATED})

    def events(self, thread_id: str) -> list[dict[str, Any]]:
        return self.db.all(LIST_EVENTS, {"thread_id": thread_id})


def append_event(tx: Tx, thread_id: str, at: float, actor: str, reason: str, detail: Any) -> None:
    """An audit event written in the caller's transaction (a receipt, an inbox answer), so the
    trail has it exactly when the fact it records was committed."""
    _event(tx, thread_id, at, actor, None, None, reason, detail)


def _event(tx: Tx, thread_id, at, actor, from_status, to_status, reason, detail) -> None:
    tx.execute(
        INSERT_EVENT,
        {
            "thread_id": thread_id,
            "at": at,
            "actor": actor,
            "from_status": from_status,
            "to_status": to_status,
            "reason": reason,
            "detail": None if detail is None else json.dumps(detail),
        },
    )
