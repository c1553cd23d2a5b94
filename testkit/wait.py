"""Waiting without guessing: every wait in the suite names what it waits for and polls for it
with a deadline, so a loaded machine makes a test slower, never wrong."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
# seconds between two looks: the first soon (most waits end within a few), then less and less
# often up to POLL_MOST, as each look costs CPU here and often in the server it asks (the suite
# is CPU-bound on two cores)
POLL, POLL_MOST = 0.02, 0.25


def until(check: Callable[[], T], what: str, timeout: float = 60) -> T:
    """``check()``'s first truthy answer; AssertionError naming ``what`` past ``timeout``."""
    deadline = time.monotonic() + timeout
    pause = POLL
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f}s for {what}: {got!r}")
        time.sleep(pause)  # the condition is another thread's or process's to make true
        pause = min(pause * 1.5, POLL_MOST)


def past(moment: float, what: str) -> None:
    """Wait until the wall clock is past ``moment``: a lease, token or deadline that ends in a
    process the test cannot hand a clock to (uvicorn, an entry script) ends by real time."""
    until(lambda: time.time() > moment, what, timeout=max(0.0, moment - time.time()) + 60)
