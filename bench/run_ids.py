"""What a random run id costs the ``runs`` primary key (issue 41), on SQLite: ``uv run python -m
bench.run_ids [rows]``. Not a section of ``python -m bench``; it backs one decision.

Rows shaped like a run's (a ``TEXT PRIMARY KEY``, a few hundred bytes) are inserted in
transactions of 100, keyed by ``store.run_ids.new_run_id`` (a UUID4: random places in the
index) and by a time-ordered id with as many random bits (48 bits of milliseconds, then a
UUID4's 32 hex digits: always at the index's end). The difference per insert is what a
time-ordered id would save each start; a start costs about 10 ms on SQLite and 19 ms on
Postgres (``bench/RESULTS.md``, section 2).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from store.run_ids import new_run_id

_CREATE = "CREATE TABLE runs (thread_id TEXT PRIMARY KEY, workflow TEXT, input TEXT)"
_INSERT = "INSERT INTO runs VALUES (?, 'refund', ?)"


def time_ordered() -> str:
    return f"thread_{time.time_ns() // 1_000_000:012x}{uuid.uuid4().hex}"


def per_insert(ids: Callable[[], str], rows: int) -> float:
    """Microseconds per insert of ``rows`` rows keyed by ``ids``, on a fresh WAL database."""
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "ids.db")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_CREATE)
        started = time.perf_counter()
        for _ in range(rows // 100):
            db.executemany(_INSERT, [(ids(), "x" * 300) for _ in range(100)])
            db.commit()
        elapsed = time.perf_counter() - started
        db.close()
    return elapsed / rows * 1e6


def main(argv: list[str]) -> None:
    rows = int(argv[0]) if argv else 100_000
    print(f"{rows:,} inserts, SQLite {sqlite3.sqlite_version}, load {os.getloadavg()[0]:.1f}")
    for name, ids in (("uuid4 (new_run_id)", new_run_id), ("time-ordered", time_ordered)):
        runs = sorted(per_insert(ids, rows) for _ in range(3))
        print(f"{name:>20}: median {runs[1]:.1f} us per insert (of 3: {runs[0]:.1f}-{runs[2]:.1f})")


if __name__ == "__main__":
    main(sys.argv[1:])
