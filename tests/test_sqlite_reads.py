"""On SQLite a process reads while another process holds the write lock: a thread of its own
waiting out the busy timeout for that lock must not hold every read of the process behind it
(pages, acknowledgements, a refusal's words), as one shared connection did."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from store.db import open_store


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_reads_go_on_while_a_writer_waits_for_another_process_s_lock(backend, tmp_path):
    import os

    with open_store() as store:
        store.db.execute("INSERT INTO halts (scope, reason, actor, at) VALUES ('x', 'r', 'a', 1)")
        other = sqlite3.connect(os.environ["SQLITE_PATH"], isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process's long write (a sweep of thousands)
        writing = threading.Thread(
            target=lambda: store.db.execute("DELETE FROM halts WHERE scope = 'x'"), daemon=True
        )
        writing.start()
        deadline = time.monotonic() + 10
        while store.db._lock.acquire(blocking=False):  # noqa: SLF001 - is the writer inside?
            store.db._lock.release()  # noqa: SLF001
            assert time.monotonic() < deadline, "the writer never took the connection"
            time.sleep(0.01)  # polls until the writer holds its connection (deadline above)
        # the writer now waits for the other process's lock; this thread reads meanwhile
        rows = store.db.all("SELECT scope FROM halts")
        assert rows == [{"scope": "x"}] and writing.is_alive()
        other.execute("ROLLBACK")
        other.close()
        writing.join(30)
        assert store.db.all("SELECT scope FROM halts") == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_reclaiming_space_vacuums_through_the_writing_connection(backend):
    """VACUUM and the WAL checkpoint run outside a transaction, on the connection that writes
    (the read-only one refuses them)."""
    import os

    from store.retention import reclaim_sqlite

    with open_store() as store:
        with store.db.transaction() as tx:
            for i in range(2000):
                tx.execute(
                    "INSERT INTO halts (scope, reason, actor, at) VALUES (:s, :r, 'a', 1)",
                    {"s": f"s{i}", "r": "x" * 200},
                )
        store.db.execute("DELETE FROM halts")
        path = os.environ["SQLITE_PATH"]

        def size() -> int:  # the database and its write-ahead log together
            return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))

        before = size()
        assert reclaim_sqlite(store.db, 0.05)
        assert size() < before and os.path.getsize(path + "-wal") == 0


def test_a_database_in_memory_reads_through_its_one_connection():
    """No file, so no second connection: reads share the writing one (and see its rows)."""
    from testkit.databases import pointed_at

    with pointed_at({"SQLITE_PATH": ":memory:"}), open_store() as store:
        store.db.execute("INSERT INTO halts (scope, reason, actor, at) VALUES ('m', 'r', 'a', 1)")
        assert store.db.all("SELECT scope FROM halts") == [{"scope": "m"}]
