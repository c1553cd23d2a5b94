"""Lease renewal for every segment a worker runs, from one thread.

A segment's lease must be renewed while its graph runs, so only a dead process's run looks
abandoned. Starting a thread per segment cost about a millisecond or two per start and resume
on a busy machine; one daemon thread per worker (``Context``: one per process for the app,
``run.py`` and ``recover.py``) renews every lease it holds instead. A lease is
renewed at most ``interval`` after it was taken or last renewed (a third of the lease), as with
a thread of its own; one the store says is lost is dropped with a warning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from core.errors import one_line

log = logging.getLogger(__name__)


class Leases:
    def __init__(self, renew: Callable[[str, str], bool], interval: Callable[[], float]):
        self._renew = renew  # (thread_id, owner) -> still held?
        self._interval = interval
        self._held: dict[tuple[str, str], float] = {}  # -> when last taken or renewed
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    @contextmanager
    def held(self, thread_id: str, owner: str) -> Iterator[None]:
        key = (thread_id, owner)
        with self._cond:
            self._held[key] = time.monotonic()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="leases", daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._held.pop(key, None)

    def hand_back(self, release: Callable[[str, str], bool]) -> list[str]:
        """Stop renewing every lease held and release each (``store.leases.release``), so
        another process takes the runs over at once; the threads running them are abandoned
        (the caller exits). Returns the threads handed back."""
        with self._cond:
            held, self._held = list(self._held), {}
        handed = []
        for thread_id, owner in held:
            try:
                if release(thread_id, owner):
                    handed.append(thread_id)
            except Exception as exc:  # noqa: BLE001 - the lease runs out instead
                log.warning("could not hand %s back: %s", thread_id, one_line(exc))
        return handed

    def _loop(self) -> None:
        while True:
            interval = max(0.1, self._interval())
            with self._cond:
                if not self._held:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                due = [k for k, at in self._held.items() if now - at >= interval]
                if not due:
                    soonest = min(self._held.values())
                    self._cond.wait(max(0.01, soonest + interval - now))
                    continue
                for key in due:
                    self._held[key] = now
            for thread_id, owner in due:
                self._renew_one(thread_id, owner)

    def _renew_one(self, thread_id: str, owner: str) -> None:
        try:
            if self._renew(thread_id, owner):
                return
        except Exception as exc:  # noqa: BLE001 - database blip: try next beat
            log.warning("lease renewal for %s failed: %s", thread_id, one_line(exc))
            return
        with self._cond:
            if self._held.pop((thread_id, owner), None) is not None:
                log.warning("lease on %s lost; its final transition will not apply", thread_id)
