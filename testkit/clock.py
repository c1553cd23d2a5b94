"""An injected clock: tests move "now" instead of sleeping through leases and deadlines."""

from __future__ import annotations

from typing import Any

HOUR = 3600.0


class Clock:
    """A settable "now" shared by every RunStore/LocalInbox a test builds."""

    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def runner_at(store: Any, clock: Clock) -> Any:
    """A Runner (and its local inbox) that read ``clock`` for now."""
    from inbox.local import LocalInbox
    from worker.runner import Runner

    return Runner(store, LocalInbox(store.tables, clock), clock=clock)


def waiting(runner: Any, thread_id: str, **kwargs: Any) -> Any:
    """A demo refund run paused on its approval."""
    outcome = runner.start("Refund order A-1004: desk wobbles", thread_id=thread_id, **kwargs)
    assert outcome.status == "waiting", outcome
    return outcome
