"""A process's stop, begun by SIGTERM: one deadline every part of the process shares.

A restart must stall nothing: on SIGTERM the app ends its long-polls at once and gives requests
and resumes ``SHUTDOWN_SECONDS``; a sweeper or resumer claims no new run and gives its current
one as long. Whatever is still going then is handed back (its lease released) so another
process takes it at once, instead of after the lease runs out. Each part asks :func:`requested`
and :func:`remaining`; :func:`on_sigterm` begins the stop.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from typing import Any

from core import settings

_stopping = threading.Event()
_deadline = math.inf


def begin(seconds: float | None = None) -> None:
    """Start the stop now (once): the deadline is ``seconds`` (``SHUTDOWN_SECONDS`` by default:
    a resumer process is given what its app has left) from here."""
    global _deadline
    if not _stopping.is_set():
        budget = settings.SHUTDOWN_SECONDS.get() if seconds is None else seconds
        _deadline = time.monotonic() + budget
        _stopping.set()


def requested() -> bool:
    return _stopping.is_set()


def remaining() -> float:
    """Seconds left before what is still going is handed back (infinite before a stop)."""
    return max(0.0, _deadline - time.monotonic())


def wait(timeout: float | None) -> bool:
    """Sleep ``timeout`` seconds (None: however long) or until the stop begins; True if it
    has."""
    return _stopping.wait(timeout)


def on_sigterm() -> None:
    """SIGTERM begins the stop, then goes to whatever handled it before (uvicorn's own
    shutdown); with no handler before, the process is left to finish on its own. Only the main
    thread may set a handler: elsewhere (an app served from a test's thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handle(signum: int, frame: Any) -> None:
        begin()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, handle)
