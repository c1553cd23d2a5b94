"""Postgres connections that cannot hang: TCP keepalives and a server-side statement timeout on
every connection (:data:`KEEPALIVES`, :func:`configure`), and a client-side deadline on round
trips for a network that stops answering.

A server-side ``statement_timeout`` needs the server to hear the statement and its answer to
come back; TCP keepalives need the peer's kernel to stop acknowledging. A black hole in between
(a proxy or load balancer that keeps the connection open but forwards nothing) defeats both, and
libpq then waits forever. So a round trip armed here that has not finished by its deadline gets
its socket shut down from a watchdog thread: the blocked call fails at once with
``psycopg.OperationalError`` (the app's 503), and the pool discards the broken connection.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from core import settings

_TICK = 0.05  # seconds between the watchdog's looks: the deadline's precision


class Watchdog:
    """One daemon thread for the whole process, started on first use."""

    def __init__(self) -> None:
        self._armed: dict[int, tuple[float, Any]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.fired = 0  # connections cut so far (tests read it)

    @contextmanager
    def guard(self, conn: Any, seconds: float | None) -> Iterator[None]:
        """Cut ``conn`` if the block has not finished within ``seconds`` (None: no deadline)."""
        if seconds is None:
            yield
            return
        token = next(self._ids)
        with self._lock:
            self._armed[token] = (time.monotonic() + seconds, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="db-deadline", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._armed.pop(token, None)

    def _run(self) -> None:
        while True:
            time.sleep(_TICK)
            now = time.monotonic()
            with self._lock:
                due = [t for t, (at, _) in self._armed.items() if at <= now]
                conns = [self._armed.pop(t)[1] for t in due]
            for conn in conns:
                self.fired += 1
                _cut(conn)


def _cut(conn: Any) -> None:
    """Shut the connection's socket down under libpq (a duplicate descriptor, so libpq still
    owns and closes its own): its pending read returns end-of-file."""
    try:
        fd = os.dup(conn.pgconn.socket)
    except Exception:  # noqa: BLE001 - already closed: nothing to cut
        return
    sock = socket.socket(fileno=fd)
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


WATCHDOG = Watchdog()


# A peer that vanished (a partition, a dead NAT entry) is noticed within about 30 s on an idle
# connection (keepalives) and on one with unacknowledged data (tcp_user_timeout), not after the
# kernel's two hours or fifteen minutes.
KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}


def configure(conn: Any) -> None:
    """Every new pooled connection gets the server-side statement timeout, unless a pooler in
    transaction mode would hand the session to others (set it on the role there)."""
    if settings.DATABASE_POOLER.get() == "transaction":
        return
    ms = int(settings.DATABASE_STATEMENT_TIMEOUT.get() * 1000)
    conn.execute(f"SET statement_timeout = {ms}")
