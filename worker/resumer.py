"""The one resumer: take queued claims from the database (``store.claimed``) and resume each on
a thread of a small pool, so every source's decision, a retry, an operator's take-over and a
stopping process's hand-back are resumed the same way.

One runs in each of the app's resumer processes (Postgres), on the app's own threads (SQLite)
and in ``recover --forever``. It holds no queue of its own: a row is taken only when a thread is
free to resume it, so a resumer that dies loses nothing but the runs it was resuming, whose
owner names its process (the app queues them again when it sees the process gone; otherwise
their lease runs out and the sweep takes them). It wakes at once when woken (:meth:`ring`: a
decision of its own process; ``NOTIFY`` on Postgres, heard by a listener thread) and otherwise
looks every ``RESUME_POLL_SECONDS``.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from core import settings, shutdown
from core.errors import one_line
from core.logs import thread_id
from store.claimed import Listener, take_next
from store.runs import lease_seconds, new_owner
from store.states import Run

if TYPE_CHECKING:
    from worker.runner import Runner

log = logging.getLogger(__name__)

TAKER_SECONDS = 10.0  # how long a close waits for the taking thread's last take to end


class Resumer:
    def __init__(self, runner: Runner, threads: int, role: str = "resumer") -> None:
        self.runner = runner
        self.threads = threads
        self.role = role
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._busy: dict[str, Run] = {}
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="resume")
        url = settings.DATABASE_URL.get()
        self._listener = Listener(url) if runner.store.backend == "postgres" and url else None
        self._loops: list[threading.Thread] = []
        self._taker = threading.Thread(target=self._loop, name="resumer", daemon=True)

    def start(self) -> Resumer:
        """Start taking (and, on Postgres, listening) on threads of their own."""
        self._loops.append(self._taker)
        if self._listener is not None:
            self._loops.append(threading.Thread(target=self._listen, name="listen", daemon=True))
        for loop in self._loops:
            loop.start()
        return self

    def ring(self, claimed: Run | None = None) -> None:
        """Look for queued runs now (``claimed``: the one that was just queued; any is taken)."""
        self._wake.set()

    def _stopping(self) -> bool:
        return self._stop.is_set() or shutdown.requested()

    def _loop(self) -> None:
        while not self._stopping():
            self._wake.clear()  # before looking: a ring from now on is seen next turn
            self.take_all()
            self._wake.wait(settings.RESUME_POLL_SECONDS.get())

    def _listen(self) -> None:
        assert self._listener is not None
        while not self._stopping():
            if self._listener.wait(settings.RESUME_POLL_SECONDS.get()):
                self._wake.set()
        self._listener.close()

    def take_all(self) -> int:
        """Take queued runs while a thread is free for them; how many were taken."""
        taken = 0
        while not self._stopping():
            with self._idle:
                if len(self._busy) >= self.threads:
                    return taken
            lease = self.runner.clock() + lease_seconds()
            try:
                run = take_next(self.runner.runs, new_owner(self.role), lease)
            except Exception as exc:  # noqa: BLE001 - the database is away: the poll tries again
                log.warning("resumer could not take a queued run: %s", one_line(exc))
                return taken
            if run is None:
                return taken
            with self._idle:
                self._busy[run.thread_id] = run
            self._pool.submit(self._resume, run)
            taken += 1
        return taken

    def _resume(self, run: Run) -> None:
        thread_id.set(run.thread_id)
        try:
            self.runner.resume_claimed(run)
        except Exception as exc:  # noqa: BLE001 - the lease and the sweep take it over
            log.warning("resume of %s stopped: %s", run.thread_id, one_line(exc))
        finally:
            with self._idle:
                self._busy.pop(run.thread_id, None)
                self._idle.notify_all()
            self._wake.set()  # a thread is free: look again

    def busy(self) -> list[str]:
        with self._idle:
            return sorted(self._busy)

    def close(self, seconds: float) -> list[str]:
        """Take no more runs; wait up to ``seconds`` for the ones being resumed; the ones still
        going then are returned (the caller hands them back, ``Runner.hand_back``)."""
        self._stop.set()
        self._wake.set()
        until = time.monotonic() + seconds
        # the take in flight ends first, on a pool still open: a run it took is resumed here
        # or handed back, never left taken by nobody (and the taker is out of the store before
        # the caller closes it: a take on a closed SQLite connection crashes the process)
        if self._taker.is_alive():
            self._taker.join(TAKER_SECONDS)
        with self._idle:
            while self._busy and time.monotonic() < until:
                self._idle.wait(min(0.1, max(0.0, until - time.monotonic())))
            left = sorted(self._busy)
        self._pool.shutdown(wait=False, cancel_futures=True)
        return left

    def hand_back(self) -> list[str]:
        """Release every run this process holds (queued again, so another resumer takes it at
        once): the end of a stop whose time ran out (``worker.stopping``)."""
        self._stop.set()
        return self.runner.hand_back()
