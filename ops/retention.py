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

from core import settings
from inbox import external_id
from store.db import Store

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
    rows, now = store.tables.retention(), clock()
    limits = {
        "max_attempts": settings.RETRY_MAX_ATTEMPTS.get(),
        "batch": batch or settings.PRUNE_BATCH.get(),
    }
    done = Pruned()
    before = now - settings.RETAIN_CHECKPOINTS_FOR.get()
    for run in rows.checkpoints_due(before=before, **limits):
        if rows.mark_checkpoints_pruned(run, now=now):
            store.checkpointer.delete_thread(run.thread_id)
            done.checkpoints += 1
    done.deliveries = rows.delete_settled(before=before, **limits)
    runs_before = now - settings.RETAIN_RUNS_FOR.get()
    for run in rows.runs_due(before=runs_before, **limits):
        if not rows.delete_run(run, external_id(run.thread_id)):
            continue  # changed since read (a manual retry): keep it
        if run.checkpoints_pruned_at is None:
            store.checkpointer.delete_thread(run.thread_id)
        done.runs += 1
    if done and store.backend == "sqlite":
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
    """Deleted rows leave free pages in the file; give them back once there are enough."""
    return store.tables.retention().reclaim_sqlite(VACUUM_FREE_FRACTION)
