"""How long decisions take, read from the database so every process reports the same: for runs
requested in a recent window (newest first, at most ``cap``), when each was requested, first
decided (a claim or an expiry) and done; and the waiting runs counted by age band and overdue.

Both reads are bounded: the first is a range of ``runs_created_idx`` with a limit (each run's
events found by ``run_events_thread_idx``), the second one aggregate over ``runs_status_idx``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from store.db import Database
from store.states import Event, Status

RECENT = """
SELECT r.workflow, r.created_at,
       (SELECT MIN(e.at) FROM run_events e
        WHERE e.thread_id = r.thread_id AND e.reason IN (:claimed, :expired)) AS decided_at,
       (SELECT MIN(e.at) FROM run_events e
        WHERE e.thread_id = r.thread_id AND e.to_status = :done) AS done_at
FROM runs r
WHERE r.created_at >= :since
ORDER BY r.created_at DESC
LIMIT :cap
"""


@dataclass(frozen=True)
class Requested:
    """A run requested in the window: when, when first decided and when done (None: not yet)."""

    workflow: str
    created_at: float
    decided_at: float | None
    done_at: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Requested:
        return cls(row["workflow"], row["created_at"], row["decided_at"], row["done_at"])


@dataclass(frozen=True)
class OpenByAge:
    """A workflow's waiting runs counted per age band (``bands[0]``: the youngest), and those
    past their deadline the sweep has not expired yet."""

    workflow: str
    bands: tuple[int, ...]
    overdue: int


def recent(db: Database, *, since: float, cap: int) -> list[Requested]:
    """Runs requested since ``since``, newest first."""
    params = {
        "claimed": Event.CLAIMED,
        "expired": Event.EXPIRED,
        "done": Status.DONE,
        "since": since,
        "cap": cap,
    }
    return [Requested.from_row(r) for r in db.all(RECENT, params)]


def open_by_age(db: Database, *, now: float, bands: tuple[float, ...]) -> list[OpenByAge]:
    """Per workflow, the waiting runs in each age band (the first: younger than ``bands[0]``
    seconds, ..., the last: older than the last edge), and the overdue ones."""
    edges = [0.0, *bands]
    columns = []
    for i, low in enumerate(edges):
        parts = [f"updated_at <= :now - {float(low)}"] if i else []
        if i + 1 < len(edges):
            parts.append(f"updated_at > :now - {float(edges[i + 1])}")
        columns.append(f"SUM(CASE WHEN {' AND '.join(parts)} THEN 1 ELSE 0 END) AS band_{i}")
    sql = (
        f"SELECT workflow, {', '.join(columns)}, "
        "SUM(CASE WHEN expires_at IS NOT NULL AND expires_at <= :now THEN 1 ELSE 0 END) "
        "AS overdue FROM runs WHERE status = 'waiting' GROUP BY workflow ORDER BY workflow"
    )
    return [
        OpenByAge(
            row["workflow"],
            tuple(int(row[f"band_{i}"] or 0) for i in range(len(edges))),
            int(row["overdue"] or 0),
        )
        for row in db.all(sql, {"now": now})
    ]


class DecisionTimes:
    """Both reads over one database (``store.tables.decision_times()``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def recent(self, *, since: float, cap: int) -> list[Requested]:
        return recent(self._db, since=since, cap=cap)

    def open_by_age(self, *, now: float, bands: tuple[float, ...]) -> list[OpenByAge]:
        return open_by_age(self._db, now=now, bands=bands)
