"""What ``/metrics`` reads from the database rather than from a process: every worker then
reports the same numbers (``ops/metrics.py`` turns them into Prometheus gauges)."""

from __future__ import annotations

from dataclasses import dataclass

from store.db import Database
from store.outbox import OutboxRows

BY_STATUS = "SELECT status, count(*) AS n FROM runs GROUP BY status"
OLDEST_WAITING = "SELECT min(updated_at) AS at FROM runs WHERE status = 'waiting'"


@dataclass(frozen=True)
class Counts:
    backlog: int  # deliveries still owed (webhooks, notifications, Slack, e-mail)
    runs_by_status: dict[str, int]  # statuses with no runs are absent
    oldest_waiting_at: float | None  # when the oldest waiting run paused; None: none waiting


def database_counts(db: Database, *, max_attempts: int) -> Counts:
    """One read of each; ``max_attempts`` is where the outbox gives a delivery up."""
    backlog = OutboxRows(db).undelivered(max_attempts=max_attempts)
    by_status = {r["status"]: int(r["n"]) for r in db.all(BY_STATUS)}
    return Counts(backlog, by_status, db.row(OLDEST_WAITING)["at"])
