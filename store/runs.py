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
                  created_at, updated_at)
VALUES (:thread_id, :workflow, 'running', :input, :owner, :lease_until, 1, :now, :now)
ON CONFLICT (thread_id) DO NOTHING
"""

MARK_WAITING = """
UPDATE runs SET status = 'waiting', interrupt_id = :interrupt_id,
       graph_interrupt_ids = :graph_interrupt_ids, request = :request, decision = NULL,
       owner = NULL, lease_until = NULL, updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status AND owner = :owner
"""

CLAIM = """
UPDATE runs SET status = 'resuming', decision = :decision, owner = :owner,
       lease_until = :lease_until, attempts = attempts + 1, updated_at = :now
WHERE thread_id = :thread_id AND status = 'waiting' AND interrupt_id = :interrupt_id
"""

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
SELECT thread_id, interrupt_id, updated_at FROM runs WHERE status = 'waiting'
ORDER BY updated_at, thread_id
"""

ESCALATED = "event interrupt.escalated"  # the reason the webhook records such events under

# Escalations recorded since the run started waiting (its updated_at), i.e. of the current
# approval, not of an earlier pause on the same thread.
LIST_WAITING_WITH_ESCALATIONS = """
SELECT r.thread_id, r.interrupt_id, r.updated_at,
       COUNT(e.id) AS escalations, MAX(e.at) AS escalated_at
FROM runs r
LEFT JOIN run_events e
       ON e.thread_id = r.thread_id AND e.reason = :escalated AND e.at >= r.updated_at
WHERE r.status = 'waiting'
GROUP BY r.thread_id, r.interrupt_id, r.updated_at
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
        to_status: str,
        reason: str,
        detail: Any = None,
    ) -> bool:
        now = self.clock()
        with self.db.transaction() as tx:
            if tx.execute(sql, {**params, "thread_id": thread_id, "now": now}) != 1:
                return False
            _event(tx, thread_id, now, actor, from_status, to_status, reason, detail)
        return True

    def create(self, thread_id: str, workflow: str, input_: Any, owner: str) -> bool:
        """Insert a new run as ``running`` owned by ``owner``; False if the id is taken."""
        return self._transition(
            INSERT_RUN,
            {
                "workflow": workflow,
                "input": json.dumps(input_),
                "owner": owner,
                "lease_until": self.clock() + lease_seconds(),
            },
            thread_id=thread_id,
            actor=owner,
            from_status=None,
            to_status=RUNNING,
            reason="started",
            detail={"workflow": workflow},
        )

    def mark_waiting(
        self,
        thread_id: str,
        owner: str,
        from_status: str,
        interrupt_id: str,
        graph_interrupt_ids: list[str],
        request: dict,
    ) -> bool:
        return self._transition(
            MARK_WAITING,
            {
                "owner": owner,
                "from_status": from_status,
                "interrupt_id": interrupt_id,
                "graph_interrupt_ids": json.dumps(graph_interrupt_ids),
                "request": json.dumps(request),
            },
            thread_id=thread_id,
            actor=owner,
            from_status=from_status,
            to_status=WAITING,
            reason="paused for approval",
            detail={"interrupt_id": interrupt_id, "action_requests": request["action_requests"]},
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

    def mark_done(self, thread_id: str, owner: str, from_status: str, result: str) -> bool:
        return self._transition(
            MARK_DONE,
            {"owner": owner, "from_status": from_status, "result": result},
            thread_id=thread_id,
            actor=owner,
            from_status=from_status,
            to_status=DONE,
            reason="finished",
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
