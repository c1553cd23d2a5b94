"""Signed anchors over the audit trail (``audit_anchors``): what the chain alone cannot show.

The hash chain uses no secret, so whoever can write to the database could recompute a run's
whole chain. An anchor is the anchor job's signed statement, at a moment, of the head (position
and hash) of every run whose trail changed since the anchor before it, of the runs retention
pruned since then, and (the first Ed25519 anchor, the genesis) of every event written before the
chain existed; signed with Ed25519 (``core.proof``) over those and the previous anchor's
signature, so the anchors form a chain of their own. A rewritten run then no longer matches a
head it was anchored at, a deleted run is missing one, a forged prune record is signed by no
anchor, and a deleted or edited anchor breaks the anchors' chain (and differs from the witness).

Which runs an anchor covers: those with an event written since ``GRACE`` seconds before the
previous anchor (an overlap, so an event committed a little after its time is still covered; a
run covered twice is checked twice).
"""

from __future__ import annotations

import json
from typing import Any

from core.proof import ED25519, GENESIS, GRACE, Signer, heads_digest, unchained_digest
from store.db import Database, Tx

__all__ = ["GENESIS", "GRACE", "write", "in_period", "stored", "pruned_runs", "unchained"]

LOCK_ANCHORS = "SELECT pg_advisory_xact_lock(25, 0)"
LATEST = "SELECT * FROM audit_anchors ORDER BY seq DESC LIMIT 1"
FIRST_SIGNED = "SELECT seq FROM audit_anchors WHERE alg = :alg ORDER BY seq LIMIT 1"
CHANGED_HEADS = """
SELECT e.thread_id, e.seq, e.hash FROM run_events e
JOIN (
    SELECT thread_id, MAX(seq) AS seq FROM run_events
    WHERE seq IS NOT NULL AND thread_id IN (SELECT thread_id FROM run_events WHERE at >= :since)
    GROUP BY thread_id
) h ON h.thread_id = e.thread_id AND h.seq = e.seq
ORDER BY e.thread_id
"""
PRUNED_SINCE = """
SELECT thread_id, events, head_hash FROM audit_pruned WHERE pruned_at >= :since
ORDER BY thread_id
"""
UNCHAINED = """
SELECT id, thread_id, at, actor, from_status, to_status, reason, detail FROM run_events
WHERE seq IS NULL ORDER BY thread_id, id
"""
LAST_EVENT = "SELECT COALESCE(MAX(id), 0) AS id FROM run_events"
INSERT = """
INSERT INTO audit_anchors
    (seq, at, last_event_id, heads, digest, prev_mac, mac, alg, kid, pruned, genesis)
VALUES
    (:seq, :at, :last_event_id, :heads, :digest, :prev_mac, :mac, :alg, :kid, :pruned, :genesis)
"""
ALL = "SELECT * FROM audit_anchors ORDER BY seq"
IN_PERIOD = "SELECT * FROM audit_anchors WHERE at >= :start AND at < :end ORDER BY seq"
FIRST_AFTER = "SELECT * FROM audit_anchors WHERE at >= :end ORDER BY seq LIMIT 1"
PRUNED = "SELECT thread_id, events, head_hash, pruned_at FROM audit_pruned"


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def public(row: dict[str, Any]) -> dict[str, Any]:
    """An anchor row as exported, witnessed and checked: JSON parsed, numbers as numbers."""
    return {
        "seq": int(row["seq"]),
        "at": float(row["at"]),
        "last_event_id": int(row["last_event_id"]),
        "heads": _json(row["heads"]),
        "digest": row["digest"],
        "prev_mac": row["prev_mac"],
        "mac": row["mac"],
        "alg": row.get("alg"),
        "kid": row.get("kid"),
        "pruned": _json(row.get("pruned")),
        "genesis": _json(row.get("genesis")),
    }


def unchained(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Events from before the chain, by run."""
    found: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        found.setdefault(row["thread_id"], []).append(row)
    return found


def _write(tx: Tx, signer: Signer, now: float, every: float | None) -> dict[str, Any] | None:
    if tx.backend == "postgres":
        tx.one(LOCK_ANCHORS)  # one writer at a time; SQLite's writers are serialised already
    latest = tx.one(LATEST)
    if latest is not None and every is not None and now - latest["at"] < every:
        return None
    since = -1.0 if latest is None else float(latest["at"]) - GRACE
    heads = [
        [r["thread_id"], int(r["seq"]), r["hash"]] for r in tx.all(CHANGED_HEADS, {"since": since})
    ]
    pruned = [
        [r["thread_id"], int(r["events"]), r["head_hash"]]
        for r in tx.all(PRUNED_SINCE, {"since": since})
    ]
    genesis = None
    if tx.one(FIRST_SIGNED, {"alg": ED25519}) is None:  # the genesis: what predates the chain
        legacy = unchained(tx.all(UNCHAINED))
        genesis = {t: [len(rows), unchained_digest(rows)] for t, rows in legacy.items()}
    anchor: dict[str, Any] = {
        "seq": 1 if latest is None else int(latest["seq"]) + 1,
        "at": float(now),
        "last_event_id": int(tx.row(LAST_EVENT)["id"]),
        "heads": heads,
        "digest": heads_digest(heads),
        "prev_mac": GENESIS if latest is None else latest["mac"],
        "mac": "",
        "alg": ED25519,
        "kid": signer.kid,
        "pruned": pruned,
        "genesis": genesis,
    }
    anchor["mac"] = signer.sign(anchor)
    row: dict[str, str | None] = {
        k: json.dumps(anchor[k], separators=(",", ":")) for k in ("heads", "pruned")
    }
    row["genesis"] = None if genesis is None else json.dumps(genesis, separators=(",", ":"))
    tx.execute(INSERT, {**anchor, **row})
    return anchor


def write(
    db: Database, signer: Signer, now: float, every: float | None = None
) -> dict[str, Any] | None:
    """Sign and store an anchor now; with ``every``, only if the newest is at least that old
    (None then: not due). Any number of anchor jobs may call it: one writes, the rest see it."""
    if every is not None:  # most calls: a plain read, no write transaction
        latest = db.one(LATEST)
        if latest is not None and now - latest["at"] < every:
            return None
    with db.transaction() as tx:
        return _write(tx, signer, now, every)


def in_period(db: Database, start: float, end: float) -> list[dict[str, Any]]:
    """The anchors of ``[start, end)`` and the first one after it (it covers the period's
    last events), for an export."""
    rows = db.all(IN_PERIOD, {"start": start, "end": end})
    rows += db.all(FIRST_AFTER, {"end": end})
    return [public(r) for r in rows]


def stored(db: Database) -> list[dict[str, Any]]:
    return [public(r) for r in db.all(ALL)]


def pruned_runs(db: Database) -> dict[str, dict[str, Any]]:
    """Retention's records as the database holds them (an anchor must sign each)."""
    return {r["thread_id"]: r for r in db.all(PRUNED)}
