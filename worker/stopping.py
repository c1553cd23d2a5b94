"""The end of a stop (:mod:`core.shutdown`) in a process that resumes runs: when the deadline
passes with a run still going, its lease is released so another process takes it at once, and
the process exits rather than finish it."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Protocol

from core import shutdown

log = logging.getLogger(__name__)


class HandsBack(Protocol):
    def hand_back(self) -> list[str]: ...


class Resumes(HandsBack, Protocol):
    def close(self, seconds: float) -> list[str]: ...


_current: list[HandsBack] = []  # the runner the process works with now
_watching = threading.Lock()
_handing = threading.Lock()  # a hand-back and its line, whole: the watcher's exit waits for it
_watcher: threading.Thread | None = None


def hand_back_when_due(runner: HandsBack) -> None:
    """Watch, on one thread per process, for the stop's deadline; if the process is still here
    then, hand back every run ``runner`` holds and exit 0 (the stop was asked for)."""
    global _watcher
    with _watching:
        _current[:] = [runner]
        if _watcher is None:
            _watcher = threading.Thread(target=_watch, name="stop", daemon=True)
            _watcher.start()


def hand_back(runner: HandsBack) -> None:
    """Hand back what ``runner`` still holds at the stop's deadline, and say so. The watcher
    and the process's own stop both call this, whichever gets there first: the runs are
    released once, by one of them, and the line is written by the one that released them
    before the watcher may exit the process."""
    with _handing:
        handed = runner.hand_back()
        if handed:
            log.warning(
                "stopping: %s not finished in time, handed back to another process",
                ", ".join(sorted(handed)),
            )


def close_resumer(resumer: Resumes, code: int, last: str | None = None) -> None:
    """Give ``resumer``'s resumes what is left of the stop; any still going then are handed
    back (queued again, another resumer takes them at once) and the process exits ``code``
    now, saying ``last`` first. Returns only when every resume finished."""
    if resumer.close(shutdown.remaining()):
        hand_back(resumer)
        if last:
            log.info(last)
        leave(code)


def leave(code: int = 0) -> None:
    """Exit now, without the threads still running abandoned resumes: a normal exit would join
    them (``concurrent.futures`` does) and wait out whatever they wait for."""
    with _handing:  # not in the middle of a hand-back and its line
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        os._exit(code)


def _watch() -> None:
    shutdown.wait(None)  # until SIGTERM (or the app's word to a resumer process)
    time.sleep(shutdown.remaining())  # what the current run is given to finish
    try:
        for runner in list(_current):
            hand_back(runner)
    except Exception:  # the process's own stop may have closed the store: exit regardless
        log.exception("stopping: hand-back failed; the leases run out instead")
    leave(0)
