"""What the ``runs`` table and its trail say, read without changing them: one run, the rows a
sweep or a listing acts on, the latest claim. :class:`store.runs.RunStore` adds the transitions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

from core import exactjson
from store import runs_sql as q
from store.db import Database, Tx
from store.event_rows import AuditEvent
from store.states import Event, Run, Status

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from store.tables import Tables


def last_claim_in(tx: Tx, thread_id: str) -> dict[str, Any] | None:
    """The latest claim's detail (approvers, source, decision), read inside a transition's own
    transaction: what a notification of the run's end says about who decided."""
    row = tx.one(q.LAST_CLAIM, {"thread_id": thread_id, "reason": Event.CLAIMED})
    event = None if row is None else AuditEvent.from_row(row)
    return event.facts if event is not None and isinstance(event.detail, dict) else None


R = TypeVar("R", bound="DataclassInstance")


def by_column(cls: type[R], row: Mapping[str, Any]) -> R:
    """A row read as the dataclass whose fields are the query's columns, named alike."""
    return cls(**{f.name: row[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class WaitingRun:
    """A waiting run as a sweep asks its inbox about it: the approval it waits on, since when,
    until when (None: no deadline), and how far the reminder ladder climbed."""

    thread_id: str
    interrupt_id: str
    updated_at: float
    expires_at: float | None
    ladder_step: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WaitingRun:
        return by_column(cls, row)


@dataclass(frozen=True)
class EscalatedRun(WaitingRun):
    """A waiting run as ``recover.py --list`` shows it: also how often the inbox escalated the
    approval it waits on, and when last (None: never)."""

    escalations: int
    escalated_at: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> EscalatedRun:
        return by_column(cls, row)


@dataclass(frozen=True)
class LadderRun:
    """A waiting run whose next reminder or escalation is due: its window (a deadline it has,
    or it would have no ladder) and the step reached."""

    thread_id: str
    interrupt_id: str
    updated_at: float
    expires_at: float
    ladder_step: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> LadderRun:
        return by_column(cls, row)


@dataclass(frozen=True)
class OverdueRun:
    """A waiting run past its deadline: what its expiry needs to take it, and to say when."""

    thread_id: str
    interrupt_id: str
    expires_at: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> OverdueRun:
        return by_column(cls, row)


@dataclass(frozen=True)
class LapsedRun:
    """A running or resuming run whose lease ran out (its process died): the state and the
    dead owner a reclaim takes it over from, conditionally."""

    thread_id: str
    status: Status
    owner: str
    lease_until: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> LapsedRun:
        return cls(row["thread_id"], Status(row["status"]), row["owner"], row["lease_until"])


@dataclass(frozen=True)
class FailedRun:
    """A failed run as a retry sees it: the attempts made and when the last failed (the
    backoff), and the claimed decision if any (a retry resumes with it, or starts over)."""

    thread_id: str
    attempts: int
    decision: Any
    updated_at: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> FailedRun:
        text = row["decision"]
        decision = None if text is None else exactjson.loads(text)
        return cls(row["thread_id"], row["attempts"], decision, row["updated_at"])


class RunReads:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    @property
    def tables(self) -> Tables:
        """The other managers over the same database (the decision path's reads and writes
        beside the runs): code outside ``store/`` asks them, never the handle."""
        from store.tables import Tables

        return Tables(self.db)

    def last_claim(self, thread_id: str) -> AuditEvent | None:
        """The latest claim's event: who decided the request the run no longer waits on, and
        through which source (``facts``)."""
        row = self.db.one(q.LAST_CLAIM, {"thread_id": thread_id, "reason": Event.CLAIMED})
        return None if row is None else AuditEvent.from_row(row)

    def cancel_requested(self, thread_id: str) -> str | None:
        row = self.db.one(q.CANCEL_REASON, {"thread_id": thread_id})
        return None if row is None else row["cancel_reason"]

    def ladder_candidates(self) -> list[LadderRun]:
        """Waiting runs before their deadline whose next reminder or escalation is due."""
        return [LadderRun.from_row(r) for r in self.db.all(q.LIST_LADDER, {"now": self.clock()})]

    def overdue(self) -> list[OverdueRun]:
        """Waiting runs whose approval deadline has passed, most overdue first."""
        rows = self.db.all(q.LIST_OVERDUE, {"now": self.clock()})
        return [OverdueRun.from_row(r) for r in rows]

    def expired(self) -> list[LapsedRun]:
        rows = self.db.all(q.LIST_EXPIRED, {"now": self.clock()})
        return [LapsedRun.from_row(r) for r in rows]

    def failed(self) -> list[FailedRun]:
        return [FailedRun.from_row(r) for r in self.db.all(q.LIST_FAILED)]

    def runnable(self) -> int:
        """Runs a sweep may still move on (running or resuming); a pending approval waits on
        people, not on a sweep."""
        return int(self.db.row(q.COUNT_RUNNABLE)["n"])

    def get(self, thread_id: str) -> Run | None:
        row = self.db.one(q.GET_RUN, {"thread_id": thread_id})
        return None if row is None else Run.from_row(row)

    def waiting(self) -> list[WaitingRun]:
        """Every waiting run, oldest first."""
        return [WaitingRun.from_row(r) for r in self.db.all(q.LIST_WAITING)]

    def waiting_answered_locally(self) -> list[WaitingRun]:
        """Like :meth:`waiting`, only those whose request in the local inbox is answered."""
        return [WaitingRun.from_row(r) for r in self.db.all(q.LIST_ANSWERED_WAITING)]

    def waiting_with_escalations(self) -> list[EscalatedRun]:
        """Like :meth:`waiting`, with the inbox's escalations of the approval each run waits
        on, so operators see which ones are overdue."""
        rows = self.db.all(
            q.LIST_WAITING_WITH_ESCALATIONS, {"escalated": Event.ESCALATION_RECEIVED}
        )
        return [EscalatedRun.from_row(r) for r in rows]

    def events(self, thread_id: str) -> list[AuditEvent]:
        """The run's audit trail in the order it was written."""
        rows = self.db.all(q.LIST_EVENTS, {"thread_id": thread_id})
        return [AuditEvent.from_row(r) for r in rows]
