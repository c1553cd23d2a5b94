"""Raising at a named fault point of this process (``core.faults.AFTER_COMMIT``), in process:
a test's hook, never a setting a deployment could carry."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from core import faults


@contextmanager
def raising_at(point: str, *, raising: bool = True) -> Iterator[list[str]]:
    """Every pass through ``point`` raises ``InjectedFault`` while the block runs (only
    recorded with ``raising=False``); yields the names of the threads that passed it (so a
    test knows the point was reached, and where)."""
    hits: list[str] = []
    lock = threading.Lock()

    def hook(name: str) -> None:
        if name == point:
            with lock:
                hits.append(threading.current_thread().name)
            if raising:
                raise faults.InjectedFault(f"injected fault at {name}")

    faults.install(hook)
    try:
        yield hits
    finally:
        faults.install(None)
