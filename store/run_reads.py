"""What the ``runs`` table and its trail say, read without changing them: one run, the rows a
sweep or a listing acts on, the latest claim. :class:`store.runs.RunStore` adds the transitions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from store import runs_sql as q
from store.db import Database, Tx
from store.event_rows import AuditEvent
from store.states import Event, Run

if TYPE_CHECKING:
    from store.tables import Tables


def last_claim_in(tx: Tx, thread_id: str) -> dict[str, Any] | None:
    """The latest claim's detail (approvers, source, decision), read inside a transition's own
    transaction: what a notification of the run's end says about who decided."""
    row = tx.one(q.LAST_CLAIM, {"thread_id": thread_id, "reason": Event.CLAIMED})
    event = None if row is None else AuditEvent.from_row(row)
    return event.facts if event is not None and isinstance(event.detail, dict) else None


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

    def ladder_candidates(self) -> list[dict[str, Any]]:
        """Waiting runs before their deadline whose next reminder or escalation is due."""
        return self.db.all(q.LIST_LADDER, {"now": self.clock()})

    def overdue(self) -> list[dict[str, Any]]:
        """Waiting runs whose approval deadline has passed, most overdue first."""
        return self.db.all(q.LIST_OVERDUE, {"now": self.clock()})

    def expired(self) -> list[dict[str, Any]]:
        return self.db.all(q.LIST_EXPIRED, {"now": self.clock()})

    def failed(self) -> list[dict[str, Any]]:
        return self.db.all(q.LIST_FAILED)

    def runnable(self) -> int:
        """Runs a sweep may still move on (running or resuming); a pending approval waits on
        people, not on a sweep."""
        return int(self.db.row(q.COUNT_RUNNABLE)["n"])

    def get(self, thread_id: str) -> Run | None:
        row = self.db.one(q.GET_RUN, {"thread_id": thread_id})
        return None if row is None else Run.from_row(row)

    def waiting(self) -> list[dict[str, Any]]:
        """``thread_id``, ``interrupt_id`` and ``updated_at`` of every waiting run, oldest first."""
        return self.db.all(q.LIST_WAITING)

    def waiting_answered_locally(self) -> list[dict[str, Any]]:
        """Like :meth:`waiting`, only those whose request in the local inbox is answered."""
        return self.db.all(q.LIST_ANSWERED_WAITING)

    def waiting_with_escalations(self) -> list[dict[str, Any]]:
        """Like :meth:`waiting`, plus ``escalations`` (count) and ``escalated_at`` (latest, or
        None) for the approval each run waits on, so operators see which ones are overdue."""
        return self.db.all(
            q.LIST_WAITING_WITH_ESCALATIONS, {"escalated": Event.ESCALATION_RECEIVED}
        )

    def events(self, thread_id: str) -> list[dict[str, Any]]:
        return self.db.all(q.LIST_EVENTS, {"thread_id": thread_id})
