"""One database handle for both backends, and the factory that opens it with its checkpointer.

SQL throughout the project is written once with ``:name`` parameters; :func:`compile_sql`
rewrites it for psycopg. SQLite runs in WAL mode with a busy timeout so several local processes
can share one file; Postgres goes through a ``psycopg_pool.ConnectionPool`` that the LangGraph
checkpointer shares, so a process holds one set of connections.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import settings
from core.errors import Unreachable, UserError, scrub
from store.deadline import KEEPALIVES, WATCHDOG, configure
from store.setup import schema_current, set_up

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from store.tables import Tables

_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")
PING = "SELECT 1 AS ok"


@lru_cache(maxsize=512)
def compile_sql(sql: str, backend: str) -> str:
    """Return ``sql`` in the backend's parameter style (sqlite keeps ``:name``)."""
    if backend == "sqlite":
        return sql
    return _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))


def redact_url(url: str) -> str:
    """The URL with its password masked (in every spelling), safe for messages and logs."""
    return scrub(url)


class Tx:
    """Statements inside one transaction (or one autocommit statement)."""

    def __init__(self, cursor: Any, backend: str):
        self._cur = cursor
        self.backend = backend

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> int:
        """Run a statement; returns the rowcount, which is how conditional transitions know
        whether they won."""
        self._cur.execute(compile_sql(sql, self.backend), params or {})
        return self._cur.rowcount

    def one(self, sql: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        self._cur.execute(compile_sql(sql, self.backend), params or {})
        row = self._cur.fetchone()
        return None if row is None else dict(row)

    def all(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        self._cur.execute(compile_sql(sql, self.backend), params or {})
        return [dict(r) for r in self._cur.fetchall()]

    def row(self, sql: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The one row a query must return (a count, a row just written)."""
        found = self.one(sql, params)
        if found is None:
            raise LookupError(f"expected a row from: {sql.strip().splitlines()[0]}")
        return found

    def many(self, sql: str, rows: list[dict[str, Any]]) -> None:
        """One statement for many rows, sent together (a bulk load)."""
        self._cur.executemany(compile_sql(sql, self.backend), rows)

    def returning(self, sql: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The row a conditional ``... RETURNING *`` changed, or None when it changed none.
        Reads every row, so SQLite finishes the statement before the commit."""
        rows = self.all(sql, params)
        return rows[0] if rows else None


class Database:
    """A SQLite file or a Postgres pool behind the same four calls."""

    def __init__(
        self,
        backend: str,
        *,
        conn: sqlite3.Connection | None = None,
        pool: ConnectionPool[Any] | None = None,
    ) -> None:
        self.backend = backend
        self._conn: Any = conn
        self._pool: Any = pool
        self._lock = threading.RLock()  # one sqlite connection shared by threads
        # SQLite reads outside a transaction use a read-only connection of their own: WAL lets
        # it read while another writer holds the lock, where the writing connection's lock may
        # be held by a thread waiting out the busy timeout (a long sweep elsewhere), and every
        # page, acknowledgement and refusal of the process would wait behind it
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        self._file = _file_of(conn) if backend == "sqlite" and conn is not None else ""
        # seconds a Postgres round trip may take before its connection is cut (None: no limit);
        # the app sets DATABASE_POOL_TIMEOUT, so a black-holed request answers 503 in time
        self.deadline: float | None = None
        self._before_close: list[Callable[[], None]] = []

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """All-or-nothing: a transition and its audit event commit together."""
        if self.backend == "sqlite":
            with self._lock:
                cur = self._conn.cursor()
                # IMMEDIATE takes the write lock up front, so the busy timeout applies instead of
                # a deferred transaction failing when it upgrades.
                cur.execute("BEGIN IMMEDIATE")
                try:
                    yield Tx(cur, "sqlite")
                except BaseException:
                    self._conn.rollback()
                    raise
                else:
                    self._conn.commit()
                finally:
                    cur.close()
        else:
            with (
                self._pool.connection() as conn,
                WATCHDOG.guard(conn, self.deadline),
                conn.transaction(),
                conn.cursor() as cur,
            ):
                yield Tx(cur, "postgres")

    def _read_connection(self) -> sqlite3.Connection | None:
        """The read-only connection, opened on first use; None for a database in memory (no
        file another connection could open): its reads share the writing connection."""
        with self._read_lock:
            if self._reader is None and self._file:
                self._reader = _sqlite_connection(f"{Path(self._file).as_uri()}?mode=ro", True)
            return self._reader

    @contextmanager
    def outside_transaction(self) -> Iterator[Tx]:
        """The writing connection with no transaction around it, for what cannot run in one
        (SQLite's VACUUM and WAL checkpoint); on Postgres, autocommit."""
        with self._autocommit(write=True) as tx:
            yield tx

    @contextmanager
    def _autocommit(self, write: bool = False) -> Iterator[Tx]:
        if self.backend == "sqlite":
            # the writing connection for a write, and inside this thread's transaction (a read
            # there sees what it wrote); else the read-only one, where there is one
            own = write or self._lock._is_owned()  # type: ignore[attr-defined]
            reader = None if own else self._read_connection()
            lock, conn = (self._lock, self._conn) if reader is None else (self._read_lock, reader)
            with lock:
                cur = conn.cursor()
                try:
                    yield Tx(cur, "sqlite")
                finally:
                    cur.close()
        else:
            with (
                self._pool.connection() as conn,
                WATCHDOG.guard(conn, self.deadline),
                conn.cursor() as cur,
            ):
                yield Tx(cur, "postgres")

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> int:
        with self.transaction() as tx:
            return tx.execute(sql, params)

    def one(self, sql: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        with self._autocommit() as tx:
            return tx.one(sql, params)

    def all(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with self._autocommit() as tx:
            return tx.all(sql, params)

    def row(self, sql: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        with self._autocommit() as tx:
            return tx.row(sql, params)

    def ping(self) -> None:
        """One trivial round trip: raises if the database cannot answer (``/readyz``)."""
        self.one(PING)

    def before_close(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` when the handle closes, before its connections go (a thread still
        sending through it finishes first: closing a connection in use can crash SQLite)."""
        if hook not in self._before_close:
            self._before_close.append(hook)

    def close(self) -> None:
        for hook in self._before_close:
            hook()
        if self._reader is not None:
            with self._read_lock:
                self._reader.close()
        if self._conn is not None:
            self._conn.close()
        if self._pool is not None:
            self._pool.close()


class Store:
    """What a process needs to run graphs: the database and a checkpointer over it.

    The checkpointer is built on first use: a delivery that is refused or ignored never
    needs it, and importing it loads LangGraph (most of a serverless cold start)."""

    def __init__(self, db: Database, checkpointer: Any = None, make: Any = None):
        self.db = db
        self._checkpointer = checkpointer
        self._make = make
        self._lock = threading.Lock()

    @property
    def tables(self) -> Tables:
        """The managers code outside ``store/`` uses instead of the handle."""
        from store.tables import Tables

        return Tables(self.db)

    @property
    def backend(self) -> str:
        return self.db.backend

    def ping(self) -> None:
        self.db.ping()

    def cut_after(self, seconds: float | None) -> None:
        """A round trip that gets no answer within ``seconds`` is cut (the app's requests:
        a 503, not a hang); None: never."""
        self.db.deadline = seconds

    @property
    def checkpointer(self) -> Any:
        if self._checkpointer is None:
            with self._lock:
                if self._checkpointer is None:
                    self._checkpointer = self._make()
        return self._checkpointer

    @property
    def checkpointer_built(self) -> bool:
        return self._checkpointer is not None


def _file_of(conn: sqlite3.Connection) -> str:
    """The file a SQLite connection opened ("" in memory)."""
    return next(row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main")


def _sqlite_connection(target: str, uri: bool = False) -> sqlite3.Connection:
    """Each of the store's: rows by name, autocommit, shared by threads, waits out a lock."""
    conn = sqlite3.connect(
        target, uri=uri, timeout=30, isolation_level=None, check_same_thread=False
    )
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def _connect_sqlite(path: str) -> sqlite3.Connection:
    try:
        conn = _sqlite_connection(path)
        conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as exc:
        raise UserError(f"cannot open the SQLite database at SQLITE_PATH={path!r}: {exc}") from exc
    return conn


def _open_pool(url: str) -> ConnectionPool[Any]:
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    timeout = settings.DATABASE_CONNECT_TIMEOUT.get()
    _check_reachable(url, timeout)
    min_size, max_size = pool_bounds()
    pool = ConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        timeout=settings.DATABASE_POOL_TIMEOUT.get(),  # an outage answers 503, not a 30 s hang
        kwargs={
            "autocommit": True,  # the checkpointer's setup creates indexes CONCURRENTLY
            # PgBouncer / RDS Proxy in transaction mode cannot keep prepared statements
            "prepare_threshold": None if settings.DATABASE_POOLER.get() == "transaction" else 0,
            "row_factory": dict_row,
            "connect_timeout": max(1, int(timeout)),
            **KEEPALIVES,
        },
        configure=configure,
        check=_check_after_idle,  # survive a Postgres restart
        open=False,
        name="approvals",
    )
    pool.open(wait=True, timeout=timeout)
    return pool


_CHECK_AFTER_IDLE = 1.0  # seconds a pooled connection may sit before it is checked again
_last_used: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def _check_after_idle(conn: Any) -> None:
    """The pool's check on checkout, only for a connection idle for a while (or marked bad):
    a busy one skips the extra round trip. One that a restart broke meanwhile fails its next
    statement, which every caller already treats as a database outage (left to the lease, or
    503 so the sender retries), and the pool then replaces it."""
    from psycopg import pq
    from psycopg_pool import ConnectionPool

    now = time.monotonic()
    idle = now - _last_used.get(conn, 0.0)
    _last_used[conn] = now
    if idle >= _CHECK_AFTER_IDLE or conn.broken or conn.pgconn.status != pq.ConnStatus.OK:
        # bounded: a check that gets no answer would otherwise outlast the pool's own timeout
        with WATCHDOG.guard(conn, settings.DATABASE_POOL_TIMEOUT.get()):
            ConnectionPool.check_connection(conn)


def pool_bounds() -> tuple[int, int]:
    """(min, max) connections: one kept open for a long-lived process; none kept and at most
    two in serverless mode (a container serves one request at a time, and thousands of
    containers must not exhaust Postgres), unless ``DATABASE_POOL_SIZE`` is set."""
    size = settings.DATABASE_POOL_SIZE.get()
    if settings.serverless():
        return 0, size if settings.DATABASE_POOL_SIZE.explicit() else 2
    return 1, size


def _check_reachable(url: str, timeout: float) -> None:
    """Fail fast with the server's own reason; the pool would retry quietly until its timeout."""
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=max(1, int(timeout)), **KEEPALIVES).close()
    except Exception as exc:  # noqa: BLE001 - psycopg.Error, or a URL libpq cannot parse
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        reason = scrub(first)
        # down or refusing us: exit 1 (try later); a URL libpq cannot read: exit 2 (fix it)
        kind = Unreachable if isinstance(exc, psycopg.OperationalError) else UserError
        raise kind(
            f"cannot connect to Postgres at DATABASE_URL={redact_url(url)}: {reason}; "
            "check the server is up and the URL is right"
        ) from None


def _saver(db: Database, path: str) -> Any:
    """The LangGraph checkpointer over the store's database (imports LangGraph)."""
    if db.backend == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        return PostgresSaver(db._pool)
    from langgraph.checkpoint.sqlite import SqliteSaver

    # its own connection: the saver commits
    return SqliteSaver(sqlite3.connect(path, timeout=30, check_same_thread=False))


@contextmanager
def open_store() -> Iterator[Store]:
    """Open the configured database, creating tables on first use; the checkpointer is built
    then (a fresh database sets it up too) or on first use (an up-to-date one)."""
    url = settings.DATABASE_URL.get()
    path = settings.SQLITE_PATH.get()
    if url:
        db = Database("postgres", pool=_open_pool(url))
    else:
        db = Database("sqlite", conn=_connect_sqlite(path))
    store = Store(db, make=lambda: _saver(db, path))
    try:
        if not schema_current(db):
            set_up(db, store.checkpointer)
        yield store
    finally:
        if db.backend == "sqlite" and store.checkpointer_built:
            store.checkpointer.conn.close()
        db.close()


@contextmanager
def open_checkpointer() -> Iterator[Any]:
    """Just the checkpointer (``SqliteSaver`` or ``PostgresSaver``), set up and ready."""
    with open_store() as store:
        yield store.checkpointer
