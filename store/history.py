"""A run's whole story, from its audit trail, for people: ``recover.py --history`` and
``GET /runs/{thread_id}/history``.

Everything comes from ``run_events`` in insertion order: transitions (started, paused, claimed,
reclaimed, retried, finished, expired, cancelled) and the facts recorded between them (a
reviewer's answer, a side effect and its idempotency key, a refused late decision).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from store.db import Database
from store.event_rows import AuditEvent
from store.runs import RunStore
from store.states import Event


@dataclass(frozen=True)
class HistoryEntry:
    """One event of a run's story: the audit event as people read it, with a line on what it
    means (``summary``)."""

    at: float
    actor: str
    from_status: str | None
    to_status: str | None
    reason: str
    detail: Any
    summary: str

    @classmethod
    def of(cls, e: AuditEvent) -> HistoryEntry:
        said = summarize(e.reason, e.detail)
        return cls(e.at, e.actor, e.from_status, e.to_status, e.reason, e.detail, said)

    def view(self) -> dict[str, Any]:
        """As ``GET /runs/{thread_id}/history`` shows it (the shape is documented)."""
        return {
            "at": self.at,
            "actor": self.actor,
            "from_status": self.from_status,
            "to_status": self.to_status,
            "reason": self.reason,
            "detail": self.detail,
            "summary": self.summary,
        }


def history(db: Database, thread_id: str) -> list[HistoryEntry]:
    """The run's events in order; empty when there is no such run."""
    return [HistoryEntry.of(e) for e in RunStore(db).events(thread_id)]


def _call(action: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in (action.get("args") or {}).items())
    return f"{action.get('name')}({args})"


def _decision(d: dict[str, Any] | None) -> str:
    if d is None:  # one of several questions, left for later (``resume_each`` asks it again)
        return "left for later"
    kind = d.get("type")
    if kind == "answer":
        return f"answer: {json.dumps(d.get('value'))}"
    if kind == "edit":
        return f"edit to {_call(d.get('edited_action') or {})}"
    if d.get("message"):
        return f"{kind}: {d['message']}"
    return str(kind)


def _stamp(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at or 0))


def summarize(reason: str, detail: Any) -> str:
    """One line on what the event means, naming the actions, decisions and keys involved."""
    d = detail if isinstance(detail, dict) else {}
    if reason == Event.PAUSED:
        actions = "; ".join(_call(a) for a in d.get("action_requests", []))
        due = f", expires {_stamp(d['expires_at'])}" if d.get("expires_at") else ""
        return f"proposed {actions} (interrupt {d.get('interrupt_id')}{due})"
    if reason in (Event.DECISION_RECORDED, Event.CLAIMED):
        decisions = d.get("decisions")
        if decisions is None:
            decisions = (d.get("decision") or {}).get("decisions", [])
        names = d.get("approvers") or ([d["decided_by"]] if d.get("decided_by") else [])
        by = f" by {', '.join(names)}" if names else ""
        return f"{'; '.join(_decision(x) for x in decisions)}{by}"
    if reason == Event.SIDE_EFFECT:
        return f"{d.get('tool')} key {d.get('idempotency_key')} -> {json.dumps(d.get('result'))}"
    if reason in (Event.FINISHED, Event.CANCELLED, Event.EXPIRED) and d.get("result"):
        return str(d["result"])
    if d:
        return json.dumps(d, sort_keys=True)
    return ""


def history_lines(events: list[HistoryEntry]) -> list[str]:
    lines = []
    for e in events:
        move = ""
        if e.to_status:
            move = f"{e.from_status or '(new)'} -> {e.to_status}  "
        text = f"{_stamp(e.at)}  {move}{e.reason}  [{e.actor}]"
        if e.summary:
            text += f"  {e.summary}"
        lines.append(text)
    return lines
