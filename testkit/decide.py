"""Decisions as a reviewer makes them, for tests and benchmarks: through the same sources the
product has (the inbox command line's, in-process; a claim like the API's), never a shortcut
past the one decision path."""

from __future__ import annotations

from typing import Any

from worker.cli import answer_request
from worker.decisions import Applied, Decision, Pending, Source
from worker.refusals import Refused
from worker.runner import Runner


def answer(
    runner: Runner, request_id: str, decisions: list[dict | None], by: str
) -> Applied | Pending:
    """``python -m inbox decide REQUEST --by BY`` in-process: raises the refusal, else the
    decision is applied (handed off to the next sweep) or counted toward a quorum."""
    result = answer_request(runner, request_id, lambda _: decisions, by)
    if isinstance(result, Refused):
        raise result
    return result


def claim(
    runner: Runner,
    thread_id: str,
    interrupt_id: str,
    decision: dict[str, Any],
    by: str = "alice",
    source: Source = Source.API,
) -> Applied | Pending | Refused:
    """A decision on the request a run waits on, as a resuming source makes it (the claimed
    row comes back in ``Applied.run``; the caller resumes it)."""
    return runner.decide(
        Decision.read(
            decision,
            thread_id=thread_id,
            interrupt_id=interrupt_id,
            approvers=[by],
            source=source,
        )
    )
