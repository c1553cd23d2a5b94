"""The reads the inbox pages, the run API and ``/lg``'s thread search answer from, by name
(``store.tables.reads()``), so a page asks for the rows it shows and never holds the handle.
The queries are ``store.queue``'s and ``store.history``'s; the rows they return,
``store.queue_rows``' and ``store.history``'s."""

from __future__ import annotations

from typing import Any

from store import queue
from store.db import Database
from store.history import HistoryEntry, history
from store.queue import PAGE, QueueFilter
from store.queue_rows import Approver, DecidedRun, InboxCopy, QueuedRun, RunLine
from store.states import Run


class Reads:
    def __init__(self, db: Database) -> None:
        self._db = db

    def queue_page(
        self,
        me: str,
        where: QueueFilter,
        after: tuple[float, str] | None = None,
        limit: int = PAGE,
        now: float | None = None,
    ) -> list[QueuedRun]:
        return queue.queue_page(self._db, me, where, after, limit, now)

    def queue_count(self, me: str, where: QueueFilter, now: float | None = None) -> int:
        return queue.queue_count(self._db, me, where, now)

    def decided_page(
        self, me: str, where: QueueFilter, offset: int, limit: int = PAGE
    ) -> tuple[list[DecidedRun], int]:
        return queue.decided_page(self._db, me, where, offset, limit)

    def side_effects(self, thread_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        return queue.side_effects(self._db, thread_ids)

    def failed_runs(self, limit: int = PAGE) -> list[RunLine]:
        return queue.failed_runs(self._db, limit)

    def stuck_runs(self, now: float, limit: int = PAGE) -> list[RunLine]:
        return queue.stuck_runs(self._db, now, limit)

    def threads_page(
        self,
        status: str | None,
        where: QueueFilter,
        ids: list[str] | None,
        order: tuple[str, str],
        offset: int,
        limit: int,
        now: float | None = None,
    ) -> list[Run]:
        return queue.threads_page(self._db, status, where, ids, order, offset, limit, now)

    def threads_count(
        self, status: str | None, where: QueueFilter, now: float | None = None
    ) -> int:
        return queue.threads_count(self._db, status, where, now)

    def thread_of_interrupt(self, interrupt_id: str) -> str | None:
        return queue.thread_of_interrupt(self._db, interrupt_id)

    def inbox_copy(self, interrupt_id: str) -> InboxCopy | None:
        return queue.inbox_copy(self._db, interrupt_id)

    def waiting_workflows(self) -> list[str]:
        return queue.waiting_workflows(self._db)

    def approvers(self, thread_id: str, interrupt_id: str) -> list[Approver]:
        return queue.approvers(self._db, thread_id, interrupt_id)

    def history(self, thread_id: str) -> list[HistoryEntry]:
        """The run's audit trail as the request page and ``GET /runs/{id}`` show it."""
        return history(self._db, thread_id)
