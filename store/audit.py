"""The audit trail that proves itself: every event in ``run_events`` has its position in its
run's chain (``seq``, from 1) and a SHA-256 over its content and the previous event's hash,
written in the event's own transaction. ``id`` is the global sequence (the order of writing).

Two transactions appending to one run's chain must not fork it: the head is read under a lock
(a transaction-scoped advisory lock on Postgres; SQLite's writers are already serialised by
``BEGIN IMMEDIATE``), and a unique ``(thread_id, seq)`` index backs that up. Retention records
each pruned run's length and head hash (``audit_pruned``), so what remains still verifies.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from store import anchors
from store.db import Database, Tx
from store.states import Event

GENESIS = "0" * 64

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

FIELDS = ("thread_id", "seq", "at", "actor", "from_status", "to_status", "reason", "detail")


def event_hash(prev_hash: str, row: dict[str, Any]) -> str:
    """The hash of one event: over the previous hash and the event's content, canonical JSON
    (floats in their shortest exact form, so both backends hash the same)."""
    content = [row[f] for f in FIELDS]
    content[2] = float(content[2])
    text = json.dumps([prev_hash, *content], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


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


@dataclass(frozen=True)
class Break:
    """The first broken link: the run, the position in its chain, the row, what is wrong."""

    thread_id: str
    position: int
    event_id: int | None
    problem: str

    def __str__(self) -> str:
        if not self.thread_id:  # the anchors' own chain
            return f"anchor {self.position}: {self.problem}"
        row = f" (row id {self.event_id})" if self.event_id is not None else ""
        return f"run {self.thread_id}, position {self.position}{row}: {self.problem}"


@dataclass(frozen=True)
class Verified:
    runs: int
    events: int
    unchained: int  # events written before the chain existed (a prefix of a run's trail)
    pruned_runs: int
    pruned_events: int
    anchors: int = 0  # signed anchors checked (their MACs only with the key)
    anchors_signed: bool = False  # False: no key was given, the MACs were not checked
    newest_anchor_at: float | None = None


def _by_run(rows: list[dict[str, Any]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    current: list[dict[str, Any]] = []
    for row in rows:
        if current and row["thread_id"] != current[0]["thread_id"]:
            yield current[0]["thread_id"], current
            current = []
        current.append(row)
    if current:
        yield current[0]["thread_id"], current


def check_run(thread_id: str, rows: list[dict[str, Any]]) -> tuple[Break | None, int]:
    """The first break in one run's rows (in the order written), and how many rows were
    written before the chain existed (only a prefix may be)."""
    prev, expected, legacy = GENESIS, 1, 0
    for index, row in enumerate(rows, start=1):
        if row["seq"] is None and row["hash"] is None and expected == 1:
            legacy += 1
            continue
        position = row["seq"] if isinstance(row["seq"], int) else index
        if row["seq"] != expected:
            problem = (
                f"position {row['seq']} where {expected} was expected "
                "(a row deleted, inserted or reordered)"
            )
            return Break(thread_id, expected, row["id"], problem), legacy
        if row["prev_hash"] != prev:
            return Break(
                thread_id, position, row["id"], "does not link to the event before it"
            ), legacy
        if row["hash"] != event_hash(prev, row):
            return Break(
                thread_id, position, row["id"], "content does not match its hash (edited)"
            ), legacy
        prev, expected = row["hash"], expected + 1
    return None, legacy


def verify(db: Database, key: str | None = None) -> Break | Verified:
    """Check every run's chain, then the signed anchors (``store.anchors``; their MACs with
    ``key``) against it; the first break found (runs in id order), else the counts."""
    rows = db.all(ALL_EVENTS)
    statuses = {r["thread_id"]: r["status"] for r in db.all(RUN_STATUSES)}
    runs = unchained = 0
    for thread_id, events in _by_run(rows):
        runs += 1
        broken, legacy = check_run(thread_id, events)
        if broken is not None:
            return broken
        unchained += legacy
        last = next((e for e in reversed(events) if e["to_status"] is not None), None)
        status = statuses.get(thread_id)
        if last is not None and status is not None and last["to_status"] != status:
            return Break(
                thread_id,
                len(events) - legacy,
                None,
                f"the trail ends in {last['to_status']!r} but the run is {status!r} "
                "(its newest events deleted?)",
            )
    signed = anchors.stored(db)
    problem = anchors.check_chain(signed, key) or anchors.check_heads(
        signed, {(r["thread_id"], r["seq"]): r["hash"] for r in rows}, anchors.pruned_runs(db)
    )
    if problem is not None:
        where = problem.position if problem.thread_id else problem.anchor
        return Break(problem.thread_id or "", where or 0, None, problem.text)
    pruned = db.row(COUNT_PRUNED)
    newest = signed[-1]["at"] if signed else None
    return Verified(
        runs,
        len(rows),
        unchained,
        int(pruned["runs"]),
        int(pruned["events"]),
        len(signed),
        key is not None,
        newest,
    )


DECISIONS = """
SELECT e.id, e.thread_id, e.at, e.actor, e.reason, e.detail, e.seq, e.prev_hash, e.hash,
       r.workflow, r.requested_by, r.created_at, r.status
FROM run_events e LEFT JOIN runs r ON r.thread_id = e.thread_id
WHERE e.reason IN (:claimed, :expired) AND e.at >= :start AND e.at < :end
ORDER BY e.at, e.id
"""


def decisions(db: Database, start: float, end: float) -> list[dict[str, Any]]:
    """Decision events (claims and expiries) in ``[start, end)``, oldest first, with their runs."""
    params = {"claimed": Event.CLAIMED, "expired": Event.EXPIRED, "start": start, "end": end}
    return db.all(DECISIONS, params)
