"""``audit verify``'s check of the whole trail: every run's hash chain, then the signed anchors
(``store.anchors``) against it, and, given one, the witness's copies of the anchors.

It names every problem it finds, not only the first: each run whose chain breaks, each anchor
missing, edited, re-signed with an untrusted key or absent from the witness, each anchored run
rewritten or deleted, each prune record no anchor signed, each event "from before the chain" the
genesis anchor did not record, and each event old enough to be anchored that no anchor covers.
What it cannot judge it states: the unanchored window (the events newer than the anchors).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core import proof
from store import anchors
from store.db import Database

ALL_EVENTS = """
SELECT id, thread_id, at, actor, from_status, to_status, reason, detail, seq, prev_hash, hash
FROM run_events ORDER BY thread_id, id
"""
RUN_STATUSES = "SELECT thread_id, status FROM runs"
COUNT_PRUNED = "SELECT COUNT(*) AS runs, COALESCE(SUM(events), 0) AS events FROM audit_pruned"


@dataclass(frozen=True)
class Break:
    """A problem: the run and position in its chain (empty run: an anchor's), the row, what is
    wrong; ``more``: every other problem found."""

    thread_id: str
    position: int
    event_id: int | None
    problem: str
    more: tuple[Break, ...] = ()

    def __str__(self) -> str:
        if not self.thread_id:  # the anchors' own chain
            return f"anchor {self.position}: {self.problem}"
        row = f" (row id {self.event_id})" if self.event_id is not None else ""
        return f"run {self.thread_id}, position {self.position}{row}: {self.problem}"

    @property
    def all(self) -> list[Break]:
        return [self, *self.more]


@dataclass(frozen=True)
class Verified:
    runs: int
    events: int
    unchained: int  # events written before the chain existed, as the genesis anchor recorded
    pruned_runs: int
    pruned_events: int
    anchors: int = 0  # signed anchors checked
    witnessed: bool = False  # the anchors matched the witness's copies
    newest_anchor_at: float | None = None
    window_events: int = 0  # the unanchored window: events no anchor covers yet
    window_runs: int = 0
    oldest_unanchored_at: float | None = None


def _by_run(rows: list[dict[str, Any]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    current: list[dict[str, Any]] = []
    for row in rows:
        if current and row["thread_id"] != current[0]["thread_id"]:
            yield current[0]["thread_id"], current
            current = []
        current.append(row)
    if current:
        yield current[0]["thread_id"], current


def _break(problem: proof.Problem) -> Break:
    if problem.thread_id:
        return Break(problem.thread_id, problem.position or 0, problem.row, problem.text)
    return Break("", problem.anchor, None, problem.text)


def _chains(
    db: Database, found: list[Break]
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Every run's chain and its status; the rows, and the events from before the chain."""
    rows = db.all(ALL_EVENTS)
    statuses = {r["thread_id"]: r["status"] for r in db.all(RUN_STATUSES)}
    legacy: dict[str, list[dict[str, Any]]] = {}
    for thread_id, events in _by_run(rows):
        problem, count = proof.check_run(thread_id, events)
        if count:
            legacy[thread_id] = events[:count]
        if problem is not None:
            found.append(_break(problem))
            continue
        last = next((e for e in reversed(events) if e["to_status"] is not None), None)
        status = statuses.get(thread_id)
        if last is not None and status is not None and last["to_status"] != status:
            text = (
                f"the trail ends in {last['to_status']!r} but the run is {status!r} "
                "(its newest events deleted?)"
            )
            found.append(Break(thread_id, len(events) - count, None, text))
    return rows, legacy


def _prunes(
    db: Database, signed: list[dict[str, Any]], anchored: set[str], found: list[Break]
) -> tuple[dict[str, dict[str, Any]], int]:
    """The prune records anchors signed; each stored one must match its signed copy, and a run
    an anchor covered may only be pruned by a signed record. The count not yet signed."""
    signed_prunes = proof.signed_prunes(signed)
    unsigned = 0
    for thread_id, record in sorted(anchors.pruned_runs(db).items()):
        copy = signed_prunes.get(thread_id)
        if copy is None:
            if thread_id in anchored:
                text = (
                    "pruned, but no anchor signs its prune record (forged; or pruned since the "
                    "newest anchor: run `approval-worker audit anchor`, then verify again)"
                )
                found.append(Break(thread_id, int(record["events"]), None, text))
            unsigned += 1
        elif [int(record["events"]), record["head_hash"]] != [copy["events"], copy["head_hash"]]:
            text = f"its prune record differs from the one anchor {copy['anchor']} signed"
            found.append(Break(thread_id, int(record["events"]), None, text))
    return signed_prunes, unsigned


def verify(
    db: Database,
    trust: proof.Trust | None = None,
    *,
    witness: list[dict[str, Any]] | None = None,
    now: float | None = None,
    limit: float | None = None,
) -> Break | Verified:
    """Check every run's chain, then the anchors (signatures with ``trust``) against it and
    the ``witness``; every problem found (as one :class:`Break` and its ``more``), else the
    counts. With ``now`` and ``limit`` (seconds), unanchored events older than ``limit`` are a
    problem too: an anchor deleted, or the anchor job stopped."""
    trust = trust or proof.Trust()
    found: list[Break] = []
    rows, legacy = _chains(db, found)
    signed = anchors.stored(db)
    if witness is not None:
        found += [_break(p) for p in proof.check_witness(signed, witness)]
    if signed:
        problem = proof.check_chain(signed, trust)
        if problem is not None:
            found.append(_break(problem))
    everything = {a["seq"]: a for a in [*(witness or []), *signed]}  # deleted ones still count
    merged = [everything[s] for s in sorted(everything)]
    anchored: dict[str, int] = {}
    for anchor in merged:
        for thread_id, position, _ in anchor["heads"]:
            anchored[thread_id] = max(anchored.get(thread_id, 0), position)
    pruned, unsigned = _prunes(db, merged, set(anchored), found)
    hashes = {(r["thread_id"], r["seq"]): r["hash"] for r in rows}
    found += [_break(p) for p in proof.check_heads(merged, hashes, pruned)]
    found += [_break(p) for p in proof.check_genesis(merged, legacy)]
    window = [
        r for r in rows if r["seq"] is not None and r["seq"] > anchored.get(r["thread_id"], 0)
    ]
    newest = merged[-1] if merged else None
    covered_until = newest["at"] - proof.GRACE if newest is not None else None
    late: dict[str, dict[str, Any]] = {}
    for r in window:
        if covered_until is not None and r["at"] < covered_until:
            late.setdefault(r["thread_id"], r)
    for thread_id, r in late.items():
        text = (
            f"no anchor covers it though it is older than anchor {newest['seq']} (inserted "  # type: ignore[index]
            "later, or the anchor that covered it deleted)"
        )
        found.append(Break(thread_id, r["seq"], r["id"], text))
    oldest = min((float(r["at"]) for r in window), default=None)
    if trust.keys and now is not None and limit is not None and oldest is not None:
        if now - oldest > limit:
            age = int(now - oldest)
            text = (
                f"{len(window)} event(s) no anchor covers, the oldest {age} s old (more than "
                f"{int(limit)} s: anchors deleted, or the anchor job is not running)"
            )
            found.append(Break("", int(newest["seq"]) if newest else 0, None, text))
    if found:
        return Break(*_fields(found[0]), more=tuple(found[1:]))
    count = db.row(COUNT_PRUNED)
    return Verified(
        len({r["thread_id"] for r in rows}),
        len(rows),
        sum(len(v) for v in legacy.values()),
        int(count["runs"]),
        int(count["events"]),
        len(signed),
        witness is not None,
        newest["at"] if newest else None,
        len(window) + unsigned,
        len({r["thread_id"] for r in window}),
        oldest,
    )


def _fields(b: Break) -> tuple[str, int, int | None, str]:
    return b.thread_id, b.position, b.event_id, b.problem


def read_witness(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        try:
            return proof.read_witness(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the witness {path} has a line that is not JSON: {exc}") from None
