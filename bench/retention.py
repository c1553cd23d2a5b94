"""Section 7: retention keeps the database flat. Reported, not asserted.

``runs`` finished runs are made through the real path (start, pause, approve in the local
inbox, claim, resume to done) on SQLite, then pruned with the clock moved past
``RETAIN_CHECKPOINTS_FOR`` (checkpoints go) and past ``RETAIN_RUNS_FOR`` (everything goes).
Then ``cycles`` more rounds of ``runs`` runs each, pruned after each: the file should stay flat.
Bytes are the SQLite file plus its WAL, after a WAL checkpoint.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.common import DECISION, REQUEST_TEXT, Figure, Section, fresh_database
from testkit.databases import environment as environ
from testkit.decide import claim
from worker.decisions import Applied

DAY = 86400.0


def _bytes(store, path: str) -> int:
    with store.db.outside_transaction() as tx:
        tx.one("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def _finish(runner, count: int, tag: str) -> None:
    for i in range(count):
        tid = f"ret_{tag}_{i}"
        outcome = runner.start(REQUEST_TEXT, thread_id=tid)
        claimed = claim(runner, tid, outcome.interrupt_id, DECISION, "bench")
        if not isinstance(claimed, Applied) or runner.resume_claimed(claimed.run).status != "done":
            raise RuntimeError(f"setup run {tid} did not finish")


def measure(tmp: Path, pg_base: str, runs: int, cycles: int) -> Section:
    from ops.retention import prune_all
    from store.db import open_store
    from worker.runner import Runner

    sec = Section("retention")
    with fresh_database("sqlite", tmp, pg_base) as env, environ(env), open_store() as store:
        path = env["SQLITE_PATH"]
        runner = Runner(store)
        empty = _bytes(store, path)
        _finish(runner, runs, "0")
        full = _bytes(store, path)
        keep = settings_days()
        prune_all(store, lambda: time.time() + keep[0] + DAY)
        audit_only = _bytes(store, path)
        prune_all(store, lambda: time.time() + keep[1] + DAY)
        pruned = _bytes(store, path)
        flat = []
        for cycle in range(1, cycles + 1):
            _finish(runner, runs, str(cycle))
            prune_all(store, lambda: time.time() + keep[1] + DAY)
            flat.append(_bytes(store, path))
    per_run = (full - empty) / runs
    per_audit = (audit_only - empty) / runs
    sec.figures.append(
        Figure(
            "retention",
            f"bytes per finished run, checkpoints pruned ({runs} runs)",
            per_audit,
            per_run,
            "B",
            per_audit / per_run,
            "reported",
            None,
            "floor = before pruning",
        )
    )
    sec.facts.update({"bytes_finished": per_run, "bytes_pruned": per_audit})
    sec.details += [
        f"SQLite, {runs} finished runs (started, paused, approved, resumed to done):",
        "",
        f"- empty database: {empty:,} bytes",
        f"- after {runs} finished runs: {full:,} bytes ({per_run:,.0f} bytes per run)",
        f"- after pruning checkpoints (RETAIN_CHECKPOINTS_FOR passed): {audit_only:,} bytes "
        f"({per_audit:,.0f} bytes per run kept for the audit period)",
        f"- after pruning the runs too (RETAIN_RUNS_FOR passed): {pruned:,} bytes",
        f"- {cycles} more cycles of {runs} runs, each pruned: "
        + ", ".join(f"{b:,}" for b in flat)
        + " bytes",
    ]
    return sec


def settings_days() -> tuple[float, float]:
    from core import settings

    return settings.RETAIN_CHECKPOINTS_FOR.get(), settings.RETAIN_RUNS_FOR.get()
