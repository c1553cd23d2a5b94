"""The ``webhook_outbox`` table: signed deliveries owed, taken by one sender at a time, settled.

Sending, signing and backoff live in ``inbox/outbox.py``; this module only reads and writes rows,
so a column change is made here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from store.db import Database, Tx

T = TypeVar("T")

ENQUEUE = """
INSERT INTO webhook_outbox (message_id, url, event_type, payload, attempts, next_attempt_at,
                            created_at, thread_key)
VALUES (:message_id, :url, :event_type, :payload, 0, :now, :now, :thread_key)
ON CONFLICT (message_id) DO NOTHING
"""

# A thread's event waits while an earlier one to the same receiver is still owed (not given up),
# so a receiver back from an outage gets each thread's events in the order they happened.
DUE = """
SELECT * FROM webhook_outbox o
WHERE o.delivered_at IS NULL AND o.next_attempt_at <= :now AND o.attempts < :max_attempts
  AND NOT EXISTS (
    SELECT 1 FROM webhook_outbox e
    WHERE o.thread_key IS NOT NULL AND e.thread_key = o.thread_key AND e.url = o.url
      AND e.id < o.id AND e.delivered_at IS NULL AND e.attempts < :max_attempts
  )
ORDER BY o.id
"""

# Taking a row pushes its next attempt out, so two flushers do not send it at the same time.
TAKE = """
UPDATE webhook_outbox SET next_attempt_at = :until
WHERE id = :id AND delivered_at IS NULL AND next_attempt_at <= :now
"""

DELIVERED = """
UPDATE webhook_outbox SET delivered_at = :now, attempts = attempts + 1, last_error = NULL
WHERE id = :id
"""

RETRY_LATER = """
UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = :next_attempt_at,
       last_error = :error
WHERE id = :id
"""

# A permanent refusal (a Slack channel that does not exist, an SMTP 5xx): no more attempts.
GIVE_UP = """
UPDATE webhook_outbox SET attempts = :attempts, last_error = :error WHERE id = :id
"""

# Still owed: not sent and not given up. Also the backlog gauge of ``/metrics``.
UNDELIVERED = """
SELECT count(*) AS n FROM webhook_outbox
WHERE delivered_at IS NULL AND attempts < :max_attempts
"""

# Settled (sent, or given up) before ``before``, oldest first and a batch at a time (retention).
DELETE_SETTLED = """
DELETE FROM webhook_outbox WHERE id IN (
    SELECT id FROM webhook_outbox
    WHERE created_at < :before AND (delivered_at IS NOT NULL OR attempts >= :max_attempts)
    ORDER BY id LIMIT :batch
)
"""


@dataclass(frozen=True)
class OutboxRow:
    """One delivery still owed, as a sender needs it."""

    id: int
    message_id: str
    url: str
    event_type: str
    payload: str
    attempts: int
    thread_key: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> OutboxRow:
        return cls(
            id=row["id"],
            message_id=row["message_id"],
            url=row["url"],
            event_type=row["event_type"],
            payload=row["payload"],
            attempts=row["attempts"],
            thread_key=row.get("thread_key"),
        )


def enqueue(
    tx: Tx,
    *,
    message_id: str,
    url: str,
    event_type: str,
    payload: str,
    now: float,
    thread_key: str | None = None,
) -> None:
    """Owe a delivery in the caller's transaction, so it commits with what it reports.
    ``thread_key``: deliveries with the same key to the same url go out in order. A
    ``message_id`` already owed is owed once (the same event, or the same reviewer's mail)."""
    params = {"message_id": message_id, "url": url, "event_type": event_type, "now": now}
    tx.execute(ENQUEUE, {**params, "payload": payload, "thread_key": thread_key})


class OutboxRows:
    """A database's owed deliveries, as its senders take and settle them
    (``store.tables.outbox()``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def together(self, owe: Callable[[Tx], T]) -> T:
        """``owe``'s deliveries (and the reads they need), committed in one transaction of their
        own: those no transition owes (a quorum's progress, an answer from the command line)."""
        with self._db.transaction() as tx:
            return owe(tx)

    def due(self, *, now: float, max_attempts: int) -> list[OutboxRow]:
        rows = self._db.all(DUE, {"now": now, "max_attempts": max_attempts})
        return [OutboxRow.from_row(r) for r in rows]

    def take(self, row_id: int, *, now: float, until: float) -> bool:
        """True if this caller may send the row now; it is then nobody else's until ``until``."""
        return self._db.execute(TAKE, {"id": row_id, "now": now, "until": until}) == 1

    def mark_delivered(self, row_id: int, *, now: float) -> None:
        self._db.execute(DELIVERED, {"id": row_id, "now": now})

    def retry_later(self, row_id: int, *, at: float, error: str) -> None:
        self._db.execute(RETRY_LATER, {"id": row_id, "error": error, "next_attempt_at": at})

    def give_up(self, row_id: int, *, attempts: int, error: str) -> None:
        """Settle a row that can never be delivered: ``attempts`` at least the limit, so it no
        longer holds its thread's later rows back."""
        self._db.execute(GIVE_UP, {"id": row_id, "attempts": attempts, "error": error})

    def undelivered(self, *, max_attempts: int) -> int:
        return int(self._db.row(UNDELIVERED, {"max_attempts": max_attempts})["n"])

    def delete_settled(self, *, before: float, max_attempts: int, batch: int) -> int:
        """Delete up to ``batch`` settled deliveries created before ``before``; how many went."""
        params = {"before": before, "max_attempts": max_attempts, "batch": batch}
        return self._db.execute(DELETE_SETTLED, params)
