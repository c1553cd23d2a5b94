"""One audit event as it is read back: :class:`AuditEvent`, its ``detail`` JSON parsed here and
nowhere else, so a reader of the trail (the history, the last claim, the queue's side effects,
the decisions export) holds a typed event and never decodes the column itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AuditEvent:
    """A row of ``run_events``: who did what to which run when, and the facts recorded."""

    at: float
    actor: str
    reason: str
    # the JSON recorded with the event (an object for every event this release writes); None:
    # nothing was recorded
    detail: Any
    from_status: str | None = None
    to_status: str | None = None
    thread_id: str | None = None
    # its place in the run's hash chain, from 1; None: written before the chain (migration 11)
    seq: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> AuditEvent:
        text = row.get("detail")
        return cls(
            at=float(row.get("at") or 0),
            actor=str(row.get("actor") or ""),
            reason=str(row.get("reason") or ""),
            detail=None if text is None or text == "" else json.loads(text),
            from_status=row.get("from_status"),
            to_status=row.get("to_status"),
            thread_id=row.get("thread_id"),
            seq=row.get("seq"),
        )

    @property
    def facts(self) -> dict[str, Any]:
        """The detail as an object: ``{}`` when nothing, or something else, was recorded."""
        return self.detail if isinstance(self.detail, dict) else {}
