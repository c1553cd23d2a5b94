"""Signed anchors over the audit trail (``audit_anchors``): what the chain alone cannot show.

The hash chain uses no secret, so whoever can write to the database could recompute a run's
whole chain. An anchor is the worker's signed statement, at a moment, of the head (position and
hash) of every run whose trail changed since the anchor before it: an HMAC with
``AUDIT_ANCHOR_KEY`` over the heads' digest, the time, and the previous anchor's MAC, so the
anchors form a chain of their own. A rewritten run then no longer matches a head it was anchored
at, a deleted run is missing one, and a deleted or edited anchor breaks the anchors' chain.

Which runs an anchor covers: those with an event written since ``GRACE`` seconds before the
previous anchor (an overlap, so an event committed a little after its time is still covered; a
run covered twice is checked twice). The sweep writes one every ``AUDIT_ANCHOR_EVERY``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from store.db import Database, Tx

GENESIS = "0" * 64
GRACE = 300.0  # seconds of overlap with the previous anchor

LOCK_ANCHORS = "SELECT pg_advisory_xact_lock(25, 0)"
LATEST = "SELECT * FROM audit_anchors ORDER BY seq DESC LIMIT 1"
CHANGED_HEADS = """
SELECT e.thread_id, e.seq, e.hash FROM run_events e
JOIN (
    SELECT thread_id, MAX(seq) AS seq FROM run_events
    WHERE seq IS NOT NULL AND thread_id IN (SELECT thread_id FROM run_events WHERE at >= :since)
    GROUP BY thread_id
) h ON h.thread_id = e.thread_id AND h.seq = e.seq
ORDER BY e.thread_id
"""
LAST_EVENT = "SELECT COALESCE(MAX(id), 0) AS id FROM run_events"
INSERT = """
INSERT INTO audit_anchors (seq, at, last_event_id, heads, digest, prev_mac, mac)
VALUES (:seq, :at, :last_event_id, :heads, :digest, :prev_mac, :mac)
"""
ALL = "SELECT * FROM audit_anchors ORDER BY seq"
IN_PERIOD = "SELECT * FROM audit_anchors WHERE at >= :start AND at < :end ORDER BY seq"
FIRST_AFTER = "SELECT * FROM audit_anchors WHERE at >= :end ORDER BY seq LIMIT 1"
PRUNED = "SELECT thread_id, events, head_hash FROM audit_pruned"


def digest(heads: list[list[Any]]) -> str:
    """SHA-256 over the heads ``[[thread_id, position, hash], ...]`` as canonical JSON."""
    text = json.dumps(heads, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def signed_text(anchor: dict[str, Any]) -> str:
    """What an anchor's MAC covers: its place, time, extent, heads' digest and predecessor."""
    fields = ("seq", "at", "last_event_id", "digest", "prev_mac")
    return json.dumps([anchor[f] for f in fields], separators=(",", ":"))


def mac(key: str, anchor: dict[str, Any]) -> str:
    return hmac.new(key.encode(), signed_text(anchor).encode(), hashlib.sha256).hexdigest()


def public(row: dict[str, Any]) -> dict[str, Any]:
    """An anchor row as exported and checked: the heads parsed, numbers as numbers."""
    heads = row["heads"]
    return {
        "seq": int(row["seq"]),
        "at": float(row["at"]),
        "last_event_id": int(row["last_event_id"]),
        "heads": json.loads(heads) if isinstance(heads, str) else heads,
        "digest": row["digest"],
        "prev_mac": row["prev_mac"],
        "mac": row["mac"],
    }


def _write(tx: Tx, key: str, now: float, every: float | None) -> dict[str, Any] | None:
    if tx.backend == "postgres":
        tx.one(LOCK_ANCHORS)  # one writer at a time; SQLite's writers are serialised already
    latest = tx.one(LATEST)
    if latest is not None and every is not None and now - latest["at"] < every:
        return None
    since = -1.0 if latest is None else float(latest["at"]) - GRACE
    rows = tx.all(CHANGED_HEADS, {"since": since})
    heads = [[r["thread_id"], int(r["seq"]), r["hash"]] for r in rows]
    anchor: dict[str, Any] = {
        "seq": 1 if latest is None else int(latest["seq"]) + 1,
        "at": float(now),
        "last_event_id": int(tx.row(LAST_EVENT)["id"]),
        "heads": heads,
        "digest": digest(heads),
        "prev_mac": GENESIS if latest is None else latest["mac"],
    }
    anchor["mac"] = mac(key, anchor)
    tx.execute(INSERT, {**anchor, "heads": json.dumps(heads, separators=(",", ":"))})
    return anchor


def write(db: Database, key: str, now: float, every: float | None = None) -> dict | None:
    """Sign and store an anchor now; with ``every``, only if the newest is at least that old
    (None then: not due). Any number of sweepers may call it: one writes, the rest see it."""
    if every is not None:  # most sweeps: a plain read, no write transaction
        latest = db.one(LATEST)
        if latest is not None and now - latest["at"] < every:
            return None
    with db.transaction() as tx:
        return _write(tx, key, now, every)


def in_period(db: Database, start: float, end: float) -> list[dict[str, Any]]:
    """The anchors of ``[start, end)`` and the first one after it (it covers the period's
    last events), for an export."""
    rows = db.all(IN_PERIOD, {"start": start, "end": end})
    rows += db.all(FIRST_AFTER, {"end": end})
    return [public(r) for r in rows]


@dataclass(frozen=True)
class Problem:
    """What is wrong with an anchor, and the run and position it concerns (if one)."""

    anchor: int
    text: str
    thread_id: str | None = None
    position: int | None = None


def check_chain(anchors: list[dict[str, Any]], key: str | None) -> Problem | None:
    """The anchors' own chain: consecutive, each linked to the one before, each heads list
    matching its digest, each MAC matching (with ``key``). ``anchors`` may start mid-chain
    (an export's): the first one's predecessor is then taken on trust."""
    prev: dict[str, Any] | None = None
    for anchor in anchors:
        if prev is not None and anchor["seq"] != prev["seq"] + 1:
            missing = prev["seq"] + 1
            return Problem(missing, f"is missing (deleted; anchor {anchor['seq']} follows)")
        if prev is not None and anchor["prev_mac"] != prev["mac"]:
            return Problem(anchor["seq"], "does not link to the anchor before it")
        if prev is None and anchor["seq"] == 1 and anchor["prev_mac"] != GENESIS:
            return Problem(anchor["seq"], "the first anchor links to another")
        if digest(anchor["heads"]) != anchor["digest"]:
            return Problem(anchor["seq"], "its heads do not match its digest (edited)")
        if key is not None and not hmac.compare_digest(anchor["mac"], mac(key, anchor)):
            return Problem(
                anchor["seq"], "its signature does not match (another key, or the anchor edited)"
            )
        prev = anchor
    return None


def check_heads(
    anchors: list[dict[str, Any]],
    hashes: dict[tuple[str, int], str],
    pruned: dict[str, dict[str, Any]],
) -> Problem | None:
    """Every anchored head against the trail as it is now (``hashes`` by run and position):
    unchanged, or its run pruned by retention at or after that position."""
    for anchor in anchors:
        for thread_id, position, head in anchor["heads"]:
            now = hashes.get((thread_id, position))
            if now == head:
                continue
            gone = pruned.get(thread_id)
            if now is None and gone is not None and int(gone["events"]) >= position:
                if int(gone["events"]) > position or gone["head_hash"] == head:
                    continue
            what = "is missing (deleted)" if now is None else "has another hash (rewritten)"
            text = f"anchored by anchor {anchor['seq']}, the event {what}"
            return Problem(anchor["seq"], text, thread_id, position)
    return None


def stored(db: Database) -> list[dict[str, Any]]:
    return [public(r) for r in db.all(ALL)]


def pruned_runs(db: Database) -> dict[str, dict[str, Any]]:
    return {r["thread_id"]: r for r in db.all(PRUNED)}
