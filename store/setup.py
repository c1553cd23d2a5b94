"""Setting a database up: the checkpointer's tables and this product's migrations, once,
however many processes start at the same moment, and without waiting on anyone else's work."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from core.errors import UserError
from store.migrations import SCHEMA_VERSION, pending

if TYPE_CHECKING:
    from store.db import Database

_SETUP_LOCK_KEY = 0x41505057  # advisory lock id serialising first-time Postgres setup
_SETUP_LOCK_WAIT = 120.0  # seconds to wait for another process's set-up before giving up


def _schema_version(db: Database) -> int | None:
    """The version the database was set up at, or None for a fresh one."""
    try:
        row = db.one("SELECT version FROM approval_schema")
    except Exception:  # noqa: BLE001 - table missing: a fresh database
        return None
    return row["version"] if row else None


def schema_current(db: Database) -> bool:
    version = _schema_version(db)
    return version is not None and version >= SCHEMA_VERSION


def set_up(db: Database, checkpointer: Any) -> None:
    """Create every table once; concurrent first starts are serialised, later starts skip it."""
    if schema_current(db):
        return
    if db.backend == "postgres":
        with db._pool.connection() as lock_conn:
            _take_setup_lock(lock_conn)
            try:
                if not schema_current(db):
                    _plain_indexes_when_new(db, checkpointer)
                    checkpointer.setup()
                    _apply_ddl(db)
            finally:
                lock_conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))
    else:
        checkpointer.setup()
        _apply_ddl(db)


def _plain_indexes_when_new(db: Database, checkpointer: Any) -> None:
    """Where the checkpointer's tables do not exist yet, its setup builds their indexes plainly.

    Its ``CREATE INDEX CONCURRENTLY`` waits for every transaction open anywhere in the database
    (another application's, another schema's), so a first start beside a busy one could wait
    out the statement timeout and fail. On the empty tables that same setup has just created, a
    plain index takes no time and waits for nobody; an existing install keeps the library's
    concurrent builds for whatever a later version adds to its big tables.
    """
    row = db.one("SELECT to_regclass('checkpoint_migrations') IS NULL AS new")
    if row is not None and row["new"]:
        checkpointer.MIGRATIONS = [
            m.replace("CREATE INDEX CONCURRENTLY", "CREATE INDEX") for m in checkpointer.MIGRATIONS
        ]


def _take_setup_lock(conn: Any) -> None:  # a pooled psycopg connection with dict rows
    """Poll for the lock instead of blocking in ``pg_advisory_lock``.

    A session blocked there is an open transaction, and the holder's ``CREATE INDEX
    CONCURRENTLY`` (the checkpointer's setup) waits for every open transaction in the database:
    two processes setting up at once would wait on each other forever, undetected by Postgres.
    """
    deadline = time.monotonic() + _SETUP_LOCK_WAIT
    while True:
        row = conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (_SETUP_LOCK_KEY,)).fetchone()
        if row["ok"]:
            return
        if time.monotonic() > deadline:
            raise UserError(
                f"another process has been setting up the database for over "
                f"{_SETUP_LOCK_WAIT:.0f}s; check for a stuck worker, then start again"
            )
        time.sleep(0.1)


def _apply_ddl(db: Database) -> None:
    """The migrations after the database's version (all of them for a fresh one), in one
    transaction with the new version number."""
    from store.keys import fill_identities  # store.keys needs store.db, which needs this

    old = _schema_version(db) or 0
    with db.transaction() as tx:
        for stmt in pending(old, db.backend):
            tx.execute(stmt)
        fill_identities(tx)  # what SQL cannot compute: the skeletons of older keys' holders
        tx.execute("DELETE FROM approval_schema")
        tx.execute("INSERT INTO approval_schema (version) VALUES (:v)", {"v": SCHEMA_VERSION})
