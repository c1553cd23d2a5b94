"""The statements retention runs (``ops/retention.py`` decides when): finished runs due for
pruning, the mark that their checkpoints went, deleting a run with every row kept for it, and
giving SQLite's free pages back.

Every step is conditional on the row read (status and ``updated_at``), so a run retried since it
was listed is left alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from store import audit
from store.db import Database

FINISHED = """
(status IN ('done', 'cancelled', 'expired') OR (status = 'failed' AND attempts >= :max_attempts))
"""

CHECKPOINTS_DUE = f"""
SELECT thread_id, status, updated_at FROM runs
WHERE checkpoints_pruned_at IS NULL AND updated_at < :before AND {FINISHED}
ORDER BY updated_at LIMIT :batch
"""

# Marked first and conditionally: a run retried since it was read is left alone.
MARK_PRUNED = """
UPDATE runs SET checkpoints_pruned_at = :now
WHERE thread_id = :thread_id AND status = :status AND updated_at = :updated_at
"""

RUNS_DUE = f"""
SELECT thread_id, status, updated_at, checkpoints_pruned_at FROM runs
WHERE updated_at < :before AND {FINISHED}
ORDER BY updated_at LIMIT :batch
"""

DELETE_RUN = """
DELETE FROM runs WHERE thread_id = :t AND status = :status AND updated_at = :updated_at
"""

# A run's rows, by thread id (``:t``) or by its inbox external id (``:x``), children first.
DELETE_RUN_ROWS = (
    "DELETE FROM run_events WHERE thread_id = :t",
    "DELETE FROM run_approvals WHERE thread_id = :t",
    "DELETE FROM run_answers WHERE thread_id = :t",
    "DELETE FROM receipts WHERE thread_id = :t",
    "DELETE FROM refunds WHERE thread_id = :t",
    "DELETE FROM purchase_orders WHERE thread_id = :t",
    "DELETE FROM inbox_requests WHERE external_id = :x",
    "DELETE FROM vigilator_requests WHERE external_id = :x",
)

PAGE_COUNT = "PRAGMA page_count"
FREELIST_COUNT = "PRAGMA freelist_count"
VACUUM = "VACUUM"
WAL_TRUNCATE = "PRAGMA wal_checkpoint(TRUNCATE)"


@dataclass(frozen=True)
class FinishedRun:
    """A finished run as it was listed; deletes and marks apply only if it is still so."""

    thread_id: str
    status: str
    updated_at: float
    checkpoints_pruned_at: float | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> FinishedRun:
        return cls(
            thread_id=row["thread_id"],
            status=row["status"],
            updated_at=row["updated_at"],
            checkpoints_pruned_at=row.get("checkpoints_pruned_at"),
        )


def checkpoints_due(
    db: Database, *, before: float, max_attempts: int, batch: int
) -> list[FinishedRun]:
    """Finished runs last changed before ``before`` whose checkpoints are still kept."""
    params = {"before": before, "max_attempts": max_attempts, "batch": batch}
    return [FinishedRun.from_row(r) for r in db.all(CHECKPOINTS_DUE, params)]


def mark_checkpoints_pruned(db: Database, run: FinishedRun, *, now: float) -> bool:
    """False when the run changed since it was listed: its checkpoints must then stay."""
    params = {"thread_id": run.thread_id, "status": run.status, "updated_at": run.updated_at}
    return db.execute(MARK_PRUNED, {**params, "now": now}) == 1


def runs_due(db: Database, *, before: float, max_attempts: int, batch: int) -> list[FinishedRun]:
    """Finished runs last changed before ``before``, oldest first."""
    params = {"before": before, "max_attempts": max_attempts, "batch": batch}
    return [FinishedRun.from_row(r) for r in db.all(RUNS_DUE, params)]


def delete_run(db: Database, run: FinishedRun, external_id: str) -> bool:
    """The run and every row kept for it, in one transaction; False (nothing deleted) when the
    run changed since it was listed. ``external_id`` is its id in the inbox tables."""
    key = {"t": run.thread_id, "x": external_id}
    with db.transaction() as tx:
        params = {**key, "status": run.status, "updated_at": run.updated_at}
        if tx.execute(DELETE_RUN, params) != 1:
            return False
        audit.record_pruned(tx, run.thread_id, time.time())
        for sql in DELETE_RUN_ROWS:
            tx.execute(sql, key)
    return True


def reclaim_sqlite(db: Database, free_fraction: float) -> bool:
    """VACUUM once ``free_fraction`` of the file is free pages (deleted rows leave them
    behind); a WAL checkpoint then gives the space back to the file system."""
    pages = db.row(PAGE_COUNT)["page_count"]
    free = db.row(FREELIST_COUNT)["freelist_count"]
    if not pages or free / pages < free_fraction:
        return False
    with db.outside_transaction() as tx:  # VACUUM cannot run inside a transaction
        tx.execute(VACUUM)
        tx.execute(WAL_TRUNCATE)
    return True


class Retention:
    """Pruning's reads and deletes over one database (``store.tables.retention()``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def checkpoints_due(self, *, before: float, max_attempts: int, batch: int) -> list[FinishedRun]:
        return checkpoints_due(self._db, before=before, max_attempts=max_attempts, batch=batch)

    def mark_checkpoints_pruned(self, run: FinishedRun, *, now: float) -> bool:
        return mark_checkpoints_pruned(self._db, run, now=now)

    def runs_due(self, *, before: float, max_attempts: int, batch: int) -> list[FinishedRun]:
        return runs_due(self._db, before=before, max_attempts=max_attempts, batch=batch)

    def delete_run(self, run: FinishedRun, external_id: str) -> bool:
        return delete_run(self._db, run, external_id)

    def delete_settled(self, *, before: float, max_attempts: int, batch: int) -> int:
        """The outbox's settled deliveries (``store.outbox``)."""
        from store.outbox import OutboxRows

        rows = OutboxRows(self._db)
        return rows.delete_settled(before=before, max_attempts=max_attempts, batch=batch)

    def reclaim_sqlite(self, free_fraction: float) -> bool:
        return reclaim_sqlite(self._db, free_fraction)
