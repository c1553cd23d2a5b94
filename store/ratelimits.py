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

from store.db import Database

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

    def hit(self, bucket: str, limit: int, window: float) -> Verdict:
        """Count one hit on ``bucket``; allowed while the sliding count is within ``limit``.
        A refused hit is counted too: hammering keeps the caller out."""
        now = self.clock()
        start = math.floor(now / window) * window
        with self.db.transaction() as tx:
            row = tx.returning(_HIT, {"bucket": bucket, "window_start": start})
            before = tx.one(_HITS, {"bucket": bucket, "window_start": start - window})
            if random.random() < _PRUNE_CHANCE:  # noqa: S311 - not a secret
                tx.execute(_PRUNE, {"before": start - 2 * window})
        hits = int(row["hits"]) if row else 1
        overlap = 1.0 - (now - start) / window
        count = hits + (int(before["hits"]) * overlap if before else 0.0)
        if count <= limit:
            return Verdict(True, 0)
        return Verdict(False, max(1, math.ceil(start + window - now)))


_OPEN_RUNS = """
SELECT COUNT(*) AS n FROM runs
WHERE requested_by = :requested_by AND status IN ('running', 'waiting', 'resuming', 'failed')
"""


def open_runs(db: Database, requested_by: str) -> int:
    """Runs the requester has not seen finish (a failed one may still be retried): the quota
    counts these."""
    return int(db.row(_OPEN_RUNS, {"requested_by": requested_by})["n"])
