"""The rows the web inbox's listings are read as (``store.queue``'s reads): a waiting run in the
queue, a decided one, a failed or stuck one, a request's inbox copy, an approver.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.hitl import HitlRequest


def _request(text: str | None) -> HitlRequest:
    return HitlRequest.parse(json.loads(text) if text else None)


@dataclass(frozen=True)
class QueuedRun:
    """A run in the queue: what it asks and of whom, how urgent it is (deadline, ladder step)
    and how far its quorum got (``approvals`` of the approval it waits on)."""

    thread_id: str
    workflow: str
    request: HitlRequest
    requested_by: str | None
    created_at: float
    updated_at: float
    expires_at: float
    ladder_step: int
    quorum: int | None
    interrupt_id: str | None
    approvals: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> QueuedRun:
        return cls(
            thread_id=row["thread_id"],
            workflow=row["workflow"],
            request=_request(row["request"]),
            requested_by=row["requested_by"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            expires_at=row["expires_at"],
            ladder_step=row["ladder_step"],
            quorum=row["quorum"],
            interrupt_id=row["interrupt_id"],
            approvals=int(row["approvals"]),
        )


@dataclass(frozen=True)
class DecidedRun:
    """A run a decision (or the deadline) moved on, as the Decided view shows how it ended."""

    thread_id: str
    workflow: str
    status: str
    request: HitlRequest
    requested_by: str | None
    updated_at: float
    result: str | None
    interrupt_id: str | None
    decision: str | None  # as stored; the page reads what it can of it
    error: str | None
    cancel_reason: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DecidedRun:
        return cls(
            thread_id=row["thread_id"],
            workflow=row["workflow"],
            status=row["status"],
            request=_request(row["request"]),
            requested_by=row["requested_by"],
            updated_at=row["updated_at"],
            result=row["result"],
            interrupt_id=row["interrupt_id"],
            decision=row["decision"],
            error=row["error"],
            cancel_reason=row["cancel_reason"],
        )


@dataclass(frozen=True)
class RunLine:
    """A run as the operators' list shows it: failed, or stuck under a lease that expired."""

    thread_id: str
    workflow: str
    status: str
    error: str | None
    attempts: int
    updated_at: float
    lease_until: float | None
    requested_by: str | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RunLine:
        return cls(
            row["thread_id"],
            row["workflow"],
            row["status"],
            row["error"],
            int(row["attempts"] or 0),
            row["updated_at"],
            row["lease_until"],
            row["requested_by"],
        )


@dataclass(frozen=True)
class InboxCopy:
    """What the local inbox's copy of a request adds to the run: its title and description,
    and the conversation that led to it (parsed)."""

    title: str
    description: str
    conversation: list[dict[str, Any]]


@dataclass(frozen=True)
class Approver:
    """Who approved the request a run waits on (or last waited on), and when."""

    reviewer: str
    at: float
