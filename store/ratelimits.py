"""Rate-limit counters every process shares: one row per bucket (an action and a caller) and
fixed window, bumped by one conditional upsert, so two uvicorn workers or two containers on
Postgres count the same hits. The previous window's count is weighed in by how much of it still
overlaps the sliding window, which smooths the burst a fixed window allows at its edge."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from core.identity import identity_key
from store.db import Database, Tx

_HIT = """
INSERT INTO rate_limits (bucket, window_start, hits) VALUES (:bucket, :window_start, 1)
ON CONFLICT (bucket, window_start) DO UPDATE SET hits = rate_limits.hits + 1
RETURNING hits
"""
_HITS = "SELECT hits FROM rate_limits WHERE bucket = :bucket AND window_start = :window_start"
_PRUNE = "DELETE FROM rate_limits WHERE window_start < :before"
_PRUNE_CHANCE = 0.01  # one hit in a hundred clears windows nobody counts any more


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int  # whole seconds until a hit would be allowed again (0 when allowed)


class RateLimits:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db, self.clock = db, clock

    def hit(self, buckets: list[str], limit: int, window: float) -> list[Verdict]:
        """Count one hit on each of ``buckets`` (a caller's address and credential); each is
        allowed while its sliding count is within ``limit``. A refused hit is counted too:
        hammering keeps the caller out. One transaction, buckets in sorted order: callers that
        share a bucket are serialised on its row (Postgres' row lock, SQLite's one writer), so
        two callers never each pass one bucket and fail the other."""
        now = self.clock()
        start = math.floor(now / window) * window
        overlap = 1.0 - (now - start) / window
        verdicts: dict[str, Verdict] = {}
        with self.db.transaction() as tx:
            for bucket in sorted(set(buckets)):
                row = tx.returning(_HIT, {"bucket": bucket, "window_start": start})
                before = tx.one(_HITS, {"bucket": bucket, "window_start": start - window})
                hits = int(row["hits"]) if row else 1
                count = hits + (int(before["hits"]) * overlap if before else 0.0)
                wait = 0 if count <= limit else max(1, math.ceil(start + window - now))
                verdicts[bucket] = Verdict(wait == 0, wait)
            if random.random() < _PRUNE_CHANCE:  # noqa: S311 - not a secret
                tx.execute(_PRUNE, {"before": start - 2 * window})
        return [verdicts[b] for b in buckets]


_OPEN = "requester_key = :key AND status IN ('running', 'waiting', 'resuming', 'failed')"
_OPEN_RUNS = f"SELECT COUNT(*) AS n FROM runs WHERE {_OPEN}"
_LOCK_REQUESTER = "SELECT pg_advisory_xact_lock(22, hashtext(:key))"
_EXISTS = "SELECT 1 AS found FROM runs WHERE thread_id = :thread_id"


class OverQuota(Exception):
    """The requester already has ``quota`` open runs: the new one was not inserted."""

    def __init__(self, quota: int):
        super().__init__(f"{quota} open runs")
        self.quota = quota


def open_runs(db: Database, requested_by: str) -> int:
    """Runs the requester has not seen finish (a failed one may still be retried): the quota
    counts these, by the requester's identity (``Rita`` and ``rita`` are one person)."""
    return int(db.row(_OPEN_RUNS, {"key": identity_key(requested_by)})["n"])


def hold_quota(tx: Tx, requested_by: str, quota: int, thread_id: str) -> None:
    """Inside the transaction that inserts ``thread_id``: raise ``OverQuota`` unless the
    requester has fewer than ``quota`` open runs (an existing id is let through: the insert
    does nothing and the caller answers that run). Counted under a per-requester lock held to
    the commit (an advisory lock on Postgres; SQLite's BEGIN IMMEDIATE has one writer), so
    concurrent starts at the edge never pass the quota together."""
    key = {"key": identity_key(requested_by)}
    if tx.backend == "postgres":
        tx.one(_LOCK_REQUESTER, key)
    if int(tx.row(_OPEN_RUNS, key)["n"]) < quota:
        return
    if tx.one(_EXISTS, {"thread_id": thread_id}) is None:
        raise OverQuota(quota)
