"""Waiting without guessing: every wait in the suite names what it waits for and polls for it
with a deadline, so a loaded machine makes a test slower, never wrong."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
POLL = 0.02  # seconds between two looks; small beside anything a test waits for


def until(check: Callable[[], T], what: str, timeout: float = 60) -> T:
    """``check()``'s first truthy answer; AssertionError naming ``what`` past ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f}s for {what}: {got!r}")
        time.sleep(POLL)  # the condition is another thread's or process's to make true


def past(moment: float, what: str) -> None:
    """Wait until the wall clock is past ``moment``: a lease, token or deadline that ends in a
    process the test cannot hand a clock to (uvicorn, an entry script) ends by real time."""
    until(lambda: time.time() > moment, what, timeout=max(0.0, moment - time.time()) + 60)
