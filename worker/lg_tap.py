"""A segment's stream, kept for the LangGraph Server API's run that asked for it.

A start or resume through ``/lg`` leaves an open run (``store.lg``) on its thread. The segment
that carries it out, in whichever process (the app's resumer, a sweep that took a dead one
over), opens a :class:`Tap`: each chunk the graph streams in a mode the run asked for is
appended as an event, and the run's end (``success``, ``interrupted``, ``error``) is recorded
with it. A segment on a thread with no open ``/lg`` run pays one indexed read and nothing more.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from core.errors import one_line
from store import lg
from store.states import Status

log = logging.getLogger(__name__)

# the run's status once its segment ended with the run in this state
ENDED = {Status.WAITING: "interrupted", Status.CANCELLED: "interrupted", Status.FAILED: "error"}


def plain(value: Any) -> Any:
    """``value`` as JSON can hold it: messages and other models as their fields, an interrupt
    as its id and value, tuples as lists."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return plain(dump())
    if hasattr(value, "id") and hasattr(value, "value") and type(value).__name__ == "Interrupt":
        return {"value": plain(value.value), "id": value.id}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def dumps(value: Any) -> str:
    return json.dumps(plain(value), default=str)


class Tap:
    """Appends one ``/lg`` run's stream events; ends it once."""

    def __init__(self, rows: lg.LgTables, run: lg.LgRun, clock: Callable[[], float]):
        self.rows = rows
        self.run = run
        self.clock = clock
        # LangGraph's stream modes; "messages-tuple" is the graph's "messages"
        self.modes = {"messages" if m == "messages-tuple" else m for m in run.modes}

    @property
    def extra_modes(self) -> list[str]:
        """The modes the graph streams for this run beyond the ones a segment reads."""
        return ["custom", *(["messages"] if "messages" in self.modes else [])]

    def __call__(self, mode: str, chunk: Any) -> None:
        if mode not in self.modes:
            return
        try:
            self.rows.append_event(self.run.run_id, mode, dumps(chunk), self.clock())
        except Exception as exc:  # noqa: BLE001 - a lost event never stops the run
            log.warning("stream event of %s not kept: %s", self.run.run_id, one_line(exc))

    def end(self, status: Status | None, error: str | None = None) -> None:
        """Record how the segment left the run; a run still active (handed on, parked) stays
        ``running`` for the segment that carries it on."""
        if status is None or status.active:
            return
        if status == Status.FAILED:
            self.event("error", {"error": "RunFailed", "message": error or "the run failed"})
        try:
            self.rows.set_status(self.run.run_id, ENDED.get(status, "success"), self.clock())
        except Exception as exc:  # noqa: BLE001 - the thread's state still says how it ended
            log.warning("end of %s not kept: %s", self.run.run_id, one_line(exc))

    def event(self, name: str, data: Any) -> None:
        self.modes.add(name)
        self(name, data)


def open_tap(rows: lg.LgTables, thread_id: str, clock: Callable[[], float]) -> Tap | None:
    """The tap of the open ``/lg`` run on the thread (now ``running``), or None."""
    try:
        found = rows.open_run(thread_id)
        if found is None:
            return None
        rows.set_status(found.run_id, "running", clock())
    except Exception as exc:  # noqa: BLE001 - the segment runs untapped rather than not at all
        log.warning("no stream kept for %s: %s", thread_id, one_line(exc))
        return None
    return Tap(rows, found, clock)
