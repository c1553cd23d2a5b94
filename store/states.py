"""The ``runs`` state machine's vocabulary: the row (:class:`Run`), its states (:class:`Status`)
and the reasons audit events are recorded under (:class:`Event`).

The enums are ``StrEnum``s, so they compare equal to the text in the database and in JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from core import exactjson


class Status(StrEnum):
    RUNNING = "running"
    WAITING = "waiting"
    RESUMING = "resuming"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"

    @property
    def active(self) -> bool:
        """A process owns the row (under a lease) and is executing the graph."""
        return self in (Status.RUNNING, Status.RESUMING)

    @property
    def finished(self) -> bool:
        """Nothing more happens to the run (a failed one can still be retried or cancelled)."""
        return self in (Status.DONE, Status.CANCELLED, Status.EXPIRED)


ACTIVE = (Status.RUNNING, Status.RESUMING)
UNFINISHED = (Status.WAITING, Status.RUNNING, Status.RESUMING)


class Event(StrEnum):
    """Why an audit event was recorded: a transition, or a fact between transitions."""

    STARTED = "started"
    PAUSED = "paused for approval"
    CLAIMED = "decision claimed"
    FINISHED = "finished"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    CANCEL_REQUESTED = "cancel requested"
    RECLAIMED = "lease expired, reclaimed"
    TAKEN_UP = "handed-off decision taken up"
    RETRY = "retry"
    REMINDER = "reminder"
    ESCALATED = "escalated"
    DECISION_RECORDED = "decision recorded"  # written by releases before the one decision path
    APPROVAL_RECORDED = "approval recorded"
    ANSWER_RECORDED = "answer recorded"  # one of several pending interrupts, answered first
    SIDE_EFFECT = "side effect"
    INBOX_NOT_CLOSED = "inbox request left open"
    ROW_SKIPPED = "sweep skipped the run"
    ESCALATION_RECEIVED = "event interrupt.escalated"  # an inbox's own escalation, by webhook
    HALTED = "halted"  # the stop button (``store.halts``), on the halts' own chain
    UNHALTED = "unhalted"
    HALT_STOPPED = "stopped by a halt"  # a run parked before its next side effect

    @staticmethod
    def received(event_type: str) -> str:
        """The reason for another inbox event delivered by webhook (``event <type>``)."""
        return f"event {event_type}"


@dataclass
class Run:
    thread_id: str
    workflow: str
    status: Status
    input: Any
    interrupt_id: str | None
    graph_interrupt_ids: list[str]
    request: dict | None
    decision: Any
    result: str | None
    error: str | None
    owner: str | None
    lease_until: float | None
    attempts: int
    created_at: float
    updated_at: float
    expires_in: float | None = None
    expires_at: float | None = None
    cancel_reason: str | None = None
    requested_by: str | None = None
    quorum: int | None = None
    ladder_step: int = 0
    separation: bool = False
    request_digest: str | None = None
    authority: list[dict[str, Any]] | None = None  # the workflow's bands, fixed at the pause
    # the groups that may approve the request as proposed (its band's); None: no matrix
    approver_groups: tuple[str, ...] | None = None

    def status_at(self, now: float) -> Status:
        """The status a reader shows at ``now``: a run still ``waiting`` past its deadline has
        expired already (no decision can take it), whether or not a sweep wrote it down yet."""
        past = self.expires_at is not None and self.expires_at <= now
        return Status.EXPIRED if self.status == Status.WAITING and past else self.status

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Run:
        def load(value: str | None) -> Any:
            return None if value is None else json.loads(value)

        return cls(
            thread_id=row["thread_id"],
            workflow=row["workflow"],
            status=Status(row["status"]),
            input=load(row["input"]),
            interrupt_id=row["interrupt_id"],
            graph_interrupt_ids=load(row["graph_interrupt_ids"]) or [],
            request=load(row["request"]),
            decision=None if row["decision"] is None else exactjson.loads(row["decision"]),
            result=row["result"],
            error=row["error"],
            owner=row["owner"],
            lease_until=row["lease_until"],
            attempts=row["attempts"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            expires_in=row.get("expires_in"),
            expires_at=row.get("expires_at"),
            cancel_reason=row.get("cancel_reason"),
            requested_by=row.get("requested_by"),
            quorum=row.get("quorum"),
            ladder_step=row.get("ladder_step") or 0,
            separation=bool(row.get("separation")),
            request_digest=row.get("request_digest"),
            authority=load(row.get("authority")),
            approver_groups=_groups(row.get("approver_groups")),
        )


def _groups(text: str | None) -> tuple[str, ...] | None:
    """``|finance|audit|`` as stored for the queue's filter, as names."""
    return None if text is None else tuple(g for g in text.split("|") if g)
