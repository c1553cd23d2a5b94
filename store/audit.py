"""The audit trail that proves itself: every event in ``run_events`` has its position in its
run's chain (``seq``, from 1) and a SHA-256 over its content and the previous event's hash,
written in the event's own transaction. ``id`` is the global sequence (the order of writing).

Two transactions appending to one run's chain must not fork it: the head is read under a lock
(a transaction-scoped advisory lock on Postgres; SQLite's writers are already serialised by
``BEGIN IMMEDIATE``), and a unique ``(thread_id, seq)`` index backs that up. Retention records
each pruned run's length and head hash (``audit_pruned``), so what remains still verifies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.proof import GENESIS, event_hash
from store.db import Database, Tx
from store.event_rows import AuditEvent
from store.states import Event

HEAD = """
SELECT seq, hash FROM run_events WHERE thread_id = :thread_id AND seq IS NOT NULL
ORDER BY seq DESC LIMIT 1
"""
# Postgres: the head read under the chain's transaction-scoped advisory lock, in one call
# (migration 19's function); a transition reads it in its own statement (``with_head``).
LOCKED_HEAD = "SELECT seq, hash FROM approval_chain_head(:thread_id)"
WITH_HEAD = """
WITH changed AS ({sql})
SELECT changed.*, head.seq AS chain_seq, head.hash AS chain_hash
FROM changed LEFT JOIN LATERAL approval_chain_head(changed.thread_id) AS head ON true
"""

Head = tuple[int, str]  # a chain's last (seq, hash); (0, GENESIS) for an empty one
INSERT_EVENT = """
INSERT INTO run_events
    (thread_id, at, actor, from_status, to_status, reason, detail, seq, prev_hash, hash)
VALUES
    (:thread_id, :at, :actor, :from_status, :to_status, :reason, :detail, :seq, :prev_hash, :hash)
"""
ALL_EVENTS = """
SELECT id, thread_id, at, actor, from_status, to_status, reason, detail, seq, prev_hash, hash
FROM run_events ORDER BY thread_id, id
"""
RUN_STATUSES = "SELECT thread_id, status FROM runs"
RECORD_PRUNED = """
INSERT INTO audit_pruned (thread_id, events, head_hash, pruned_at)
SELECT :thread_id, COUNT(*), MAX(CASE WHEN seq = (
    SELECT MAX(seq) FROM run_events WHERE thread_id = :thread_id) THEN hash END), :now
FROM run_events WHERE thread_id = :thread_id
ON CONFLICT (thread_id) DO NOTHING
"""
COUNT_PRUNED = "SELECT COUNT(*) AS runs, COALESCE(SUM(events), 0) AS events FROM audit_pruned"


def with_head(tx: Tx, sql: str) -> str:
    """``sql`` (a ``... RETURNING *`` on ``runs``) also returning its run's chain head, read
    under the chain's lock, on Postgres; unchanged on SQLite, where writers are serialised and
    the head is read by the append (``head_of`` then gives None)."""
    return WITH_HEAD.format(sql=sql.strip()) if tx.backend == "postgres" else sql


def head_of(row: dict[str, Any]) -> Head | None:
    """Take the chain head ``with_head`` added off the row (None if it added none)."""
    if "chain_hash" not in row:
        return None
    seq, hash_ = row.pop("chain_seq"), row.pop("chain_hash")
    return (0, GENESIS) if hash_ is None else (seq, hash_)


def append(tx: Tx, event: dict[str, Any], head: Head | None = None) -> None:
    """Write ``event`` (the ``run_events`` columns) as the next link of its run's chain;
    ``head``: the chain's head, if the caller read it under the lock already."""
    append_many(tx, [event], {event["thread_id"]: head} if head is not None else None)


def append_many(tx: Tx, events: list[dict[str, Any]], known: dict[str, Head] | None = None) -> None:
    """Write ``events``, in order, as the next links of their runs' chains, sent together: a
    bulk load (an import, the bench's trail) reads each run's head once, not once per event."""
    heads: dict[str, Head] = dict(known or {})
    rows = []
    for event in events:
        thread_id = event["thread_id"]
        if thread_id not in heads:
            locked = LOCKED_HEAD if tx.backend == "postgres" else HEAD
            head = tx.one(locked, {"thread_id": thread_id})
            heads[thread_id] = (0, GENESIS) if head is None else (head["seq"], head["hash"])
        seq, prev = heads[thread_id]
        row = {**event, "at": float(event["at"]), "seq": seq + 1, "prev_hash": prev}
        row["hash"] = event_hash(prev, row)
        heads[thread_id] = (seq + 1, row["hash"])
        rows.append(row)
    if len(rows) == 1:  # the usual case: one statement, without executemany's batching
        tx.execute(INSERT_EVENT, rows[0])
    else:
        tx.many(INSERT_EVENT, rows)


def record_pruned(tx: Tx, thread_id: str, now: float) -> None:
    """Before a run's events are deleted: how many there were and the head's hash."""
    tx.execute(RECORD_PRUNED, {"thread_id": thread_id, "now": now})


DECISIONS = """
SELECT e.id, e.thread_id, e.at, e.actor, e.reason, e.detail, e.seq, e.prev_hash, e.hash,
       r.workflow, r.requested_by, r.created_at, r.status
FROM run_events e LEFT JOIN runs r ON r.thread_id = e.thread_id
WHERE e.reason IN (:claimed, :expired) AND e.at >= :start AND e.at < :end
ORDER BY e.at, e.id
"""


@dataclass(frozen=True)
class DecisionEvent:
    """A decision (a claim or an expiry) as the decisions export reads it: the event, its
    hashes in its run's chain, and the run it decided (its columns None: pruned since)."""

    event: AuditEvent
    prev_hash: str | None
    hash: str | None
    workflow: str | None
    requested_by: str | None
    requested_at: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DecisionEvent:
        return cls(
            event=AuditEvent.from_row(row),
            prev_hash=row["prev_hash"],
            hash=row["hash"],
            workflow=row["workflow"],
            requested_by=row["requested_by"],
            requested_at=row["created_at"],
        )


def decisions(db: Database, start: float, end: float) -> list[DecisionEvent]:
    """Decision events (claims and expiries) in ``[start, end)``, oldest first, with their runs."""
    params = {"claimed": Event.CLAIMED, "expired": Event.EXPIRED, "start": start, "end": end}
    return [DecisionEvent.from_row(r) for r in db.all(DECISIONS, params)]


DECISION_RUNS = """
SELECT DISTINCT thread_id FROM run_events
WHERE reason IN (:claimed, :expired) AND at >= :start AND at < :end ORDER BY thread_id
"""
CHAIN = """
SELECT id, thread_id, at, actor, from_status, to_status, reason, detail, seq, prev_hash, hash
FROM run_events WHERE thread_id = :thread_id ORDER BY id
"""


def decision_runs(db: Database, start: float, end: float) -> list[str]:
    """The runs with a decision (a claim or an expiry) in ``[start, end)``."""
    params = {"claimed": Event.CLAIMED, "expired": Event.EXPIRED, "start": start, "end": end}
    return [r["thread_id"] for r in db.all(DECISION_RUNS, params)]


def chain(db: Database, thread_id: str) -> list[dict[str, Any]]:
    """One run's events in the order written, as they are hashed."""
    return db.all(CHAIN, {"thread_id": thread_id})
