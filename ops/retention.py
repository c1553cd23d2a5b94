"""Retention: what keeps the database flat when the worker runs for a year.

Checkpoints are most of a finished run's bytes and nothing reads them once the run is over, so
they go first (``RETAIN_CHECKPOINTS_FOR``, via the checkpointer's own ``delete_thread``). The
run row, its audit events, receipts, ledger rows and inbox rows are the audit record; they go
after ``RETAIN_RUNS_FOR``. Only finished runs are touched: done, cancelled, expired, and failed
runs that used up their automatic retries (``RETRY_MAX_ATTEMPTS``); waiting and active runs
never. Each step takes at most ``PRUNE_BATCH`` runs, oldest first, so a sweep stays short.
SQLite gives freed pages back to the file system with VACUUM once enough are free; Postgres
leaves it to autovacuum.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core import settings
from inbox import external_id
from store.db import Store

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

# A run's rows, by thread id (``{t}``) or by its inbox external id (``{x}``).
DELETE_RUN_ROWS = (
    "DELETE FROM run_events WHERE thread_id = :t",
    "DELETE FROM run_approvals WHERE thread_id = :t",
    "DELETE FROM receipts WHERE thread_id = :t",
    "DELETE FROM refunds WHERE thread_id = :t",
    "DELETE FROM purchase_orders WHERE thread_id = :t",
    "DELETE FROM inbox_approvals WHERE request_id IN "
    "(SELECT id FROM inbox_requests WHERE external_id = :x)",
    "DELETE FROM inbox_requests WHERE external_id = :x",
    "DELETE FROM vigilator_requests WHERE external_id = :x",
)
DELETE_RUN = """
DELETE FROM runs WHERE thread_id = :t AND status = :status AND updated_at = :updated_at
"""
# Deliveries that are settled (sent, or given up) once the checkpoint period has passed.
DELETE_OUTBOX = """
DELETE FROM webhook_outbox WHERE id IN (
    SELECT id FROM webhook_outbox
    WHERE created_at < :before AND (delivered_at IS NOT NULL OR attempts >= :max_attempts)
    ORDER BY id LIMIT :batch
)
"""

VACUUM_FREE_FRACTION = 0.25  # VACUUM a SQLite file once this share of its pages is free


@dataclass
class Pruned:
    checkpoints: int = 0
    runs: int = 0
    deliveries: int = 0
    vacuumed: bool = False

    def __bool__(self) -> bool:
        return bool(self.checkpoints or self.runs or self.deliveries)

    def line(self) -> str:
        text = (
            f"pruned checkpoints of {self.checkpoints} runs, {self.runs} runs, "
            f"{self.deliveries} settled deliveries"
        )
        return text + (" (database vacuumed)" if self.vacuumed else "")


def prune(
    store: Store, clock: Callable[[], float] = time.time, *, batch: int | None = None
) -> Pruned:
    """One bounded step of each kind of pruning; call again while it returns something."""
    db, now = store.db, clock()
    batch = batch or settings.PRUNE_BATCH.get()
    params: dict[str, Any] = {
        "max_attempts": settings.RETRY_MAX_ATTEMPTS.get(),
        "batch": batch,
    }
    done = Pruned()
    before = now - settings.RETAIN_CHECKPOINTS_FOR.get()
    for row in db.all(CHECKPOINTS_DUE, {**params, "before": before}):
        if db.execute(MARK_PRUNED, {**row, "now": now}) == 1:
            store.checkpointer.delete_thread(row["thread_id"])
            done.checkpoints += 1
    done.deliveries = db.execute(DELETE_OUTBOX, {**params, "before": before})
    runs_before = now - settings.RETAIN_RUNS_FOR.get()
    for row in db.all(RUNS_DUE, {**params, "before": runs_before}):
        key = {"t": row["thread_id"], "x": external_id(row["thread_id"])}
        with db.transaction() as tx:
            if tx.execute(DELETE_RUN, {**key, **row}) != 1:
                continue  # changed since read (a manual retry): keep it
            for sql in DELETE_RUN_ROWS:
                tx.execute(sql, key)
        if row["checkpoints_pruned_at"] is None:
            store.checkpointer.delete_thread(row["thread_id"])
        done.runs += 1
    if done and db.backend == "sqlite":
        done.vacuumed = reclaim_sqlite(store)
    return done


def prune_all(store: Store, clock: Callable[[], float] = time.time) -> Pruned:
    """``recover.py --prune``: bounded steps until nothing is due."""
    total = Pruned()
    while step := prune(store, clock):
        total.checkpoints += step.checkpoints
        total.runs += step.runs
        total.deliveries += step.deliveries
        total.vacuumed = total.vacuumed or step.vacuumed
    return total


def reclaim_sqlite(store: Store) -> bool:
    """VACUUM when a large share of the file is free pages (deleted rows leave them behind);
    a WAL checkpoint then gives the space back to the file system."""
    db = store.db
    pages = db.row("PRAGMA page_count")["page_count"]
    free = db.row("PRAGMA freelist_count")["freelist_count"]
    if not pages or free / pages < VACUUM_FREE_FRACTION:
        return False
    with db._autocommit() as tx:  # VACUUM cannot run inside a transaction
        tx.execute("VACUUM")
        tx.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return True
