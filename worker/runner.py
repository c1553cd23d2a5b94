"""The worker as one object, and the ways entry points open it.

:class:`Runner` is the sweeper, which is the lifecycle, which runs segments over the shared
context: each layer in its own module, each using only the ones below it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ops import metrics
from store.db import open_store
from worker.outcome import Outcome
from worker.sweep import Sweeper


class Runner(Sweeper):
    """Starts, claims, resumes, cancels, retries and sweeps runs against one store and inbox.

    The overrides below only measure (``ops.metrics``); the work is the layers' own."""

    def claim(self, *args: Any, **kwargs: Any):
        result = super().claim(*args, **kwargs)
        metrics.count_claim(result)
        return result

    def run_segment(self, *args: Any, **kwargs: Any) -> Outcome:
        with metrics.timed("segment"):
            return super().run_segment(*args, **kwargs)

    def resumed(self, claimed_at: float) -> None:
        metrics.resumed(max(0.0, self.clock() - claimed_at))

    def recovery_pass(self, *, retry_failed: bool = False) -> list[Outcome]:
        with metrics.timed("sweep"):
            return super().recovery_pass(retry_failed=retry_failed)


@contextmanager
def open_runner() -> Iterator[Runner]:
    with open_store() as store:
        runner = Runner(store)
        try:
            yield runner
        finally:
            runner.inbox.shutdown()


def run_thread(
    thread_id: str,
    input_: str,
    *,
    workflow: str = "refund",
    on_start: Callable[[str], None] | None = None,
    expires_in: str | None = None,
    requested_by: str | None = None,
) -> Outcome:
    """Open the store, run one segment of a new thread, record how it ended, return."""
    with open_runner() as runner:
        return runner.start(
            input_,
            thread_id=thread_id,
            workflow=workflow,
            on_start=on_start,
            expires_in=expires_in,
            requested_by=requested_by,
        )
