"""Fault points of this process (``core.faults``), in process: a test raises at one, or only
watches which threads pass some; a test's hook, never a setting a deployment could carry."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from core import faults


@contextmanager
def passes(*points: str, raising: bool = False) -> Iterator[dict[str, list[str]]]:
    """While the block runs, record the name of each thread that passes one of ``points``
    (and raise ``InjectedFault`` there if ``raising``); yields point -> thread names."""
    hits: dict[str, list[str]] = {point: [] for point in points}
    lock = threading.Lock()

    def hook(name: str) -> None:
        if name in hits:
            with lock:
                hits[name].append(threading.current_thread().name)
            if raising:
                raise faults.InjectedFault(f"injected fault at {name}")

    faults.install(hook)
    try:
        yield hits
    finally:
        faults.install(None)


@contextmanager
def raising_at(point: str, *, raising: bool = True) -> Iterator[list[str]]:
    """Every pass through ``point`` raises ``InjectedFault`` while the block runs (only
    recorded with ``raising=False``); yields the names of the threads that passed it (so a
    test knows the point was reached, and where)."""
    with passes(point, raising=raising) as hits:
        yield hits[point]
