"""A first start on a busy Postgres (issue 33's set-up errors): the checkpointer's own setup
builds its indexes with ``CREATE INDEX CONCURRENTLY``, which waits for every statement running
anywhere in the database. A first start beside a long query (another application's, another
test worker's schema) waited out the statement timeout and the app never started. On the empty
tables that start has just created, the indexes are built plainly and nobody is waited for."""

from __future__ import annotations

import threading

import psycopg
import pytest

from testkit.databases import fresh_database
from testkit.wait import until

pytestmark = pytest.mark.postgres


def test_a_first_start_does_not_wait_for_a_long_query_elsewhere(
    postgres_url, tmp_path, monkeypatch
):
    busy = psycopg.connect(postgres_url, autocommit=True)
    query = threading.Thread(target=lambda: _run_until_cancelled(busy), daemon=True)
    query.start()
    until(lambda: _running(postgres_url, busy.info.backend_pid), "the long query to run")
    try:
        with fresh_database("postgres", tmp_path, postgres_url) as env:
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            monkeypatch.setenv("DATABASE_STATEMENT_TIMEOUT", "2")  # far below the query's life
            from store.db import open_store

            with open_store() as store:
                names = {r["indexname"] for r in store.db.all("SELECT indexname FROM pg_indexes")}
            assert "checkpoints_thread_id_idx" in names  # the checkpointer's own, built
            assert _running(postgres_url, busy.info.backend_pid)  # it never had to end first
    finally:
        busy.cancel()
        query.join(timeout=30)
        busy.close()


def _run_until_cancelled(conn: psycopg.Connection) -> None:
    try:
        conn.execute("SELECT pg_sleep(600)")  # the long query, ended by cancel()
    except psycopg.errors.QueryCanceled:
        pass


def _running(url: str, pid: int) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row[0] == "active"
