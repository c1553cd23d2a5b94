"""The ``vigilator_requests`` table: each Vigilator create, recorded before it is sent, so a
create that may have landed is looked up instead of sent twice (``inbox/vigilator``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from store.db import Database

INSERT_REQUEST = """
INSERT INTO vigilator_requests (dedupe_key, external_id, body, attempts, created_at)
VALUES (:dedupe_key, :external_id, :body, 0, :now)
ON CONFLICT (dedupe_key) DO NOTHING
"""

GET_REQUEST = "SELECT * FROM vigilator_requests WHERE dedupe_key = :dedupe_key"

# Only one process sends a given create at a time: the winner holds it until ``sending_until``.
TAKE_SEND = """
UPDATE vigilator_requests SET sending_until = :until
WHERE dedupe_key = :dedupe_key AND interrupt_id IS NULL
  AND (sending_until IS NULL OR sending_until < :now)
"""

# Counted before each POST goes out, so a process that dies mid-request leaves attempts > 0 and
# whoever opens the request next looks for the interrupt before creating another.
COUNT_ATTEMPT = """
UPDATE vigilator_requests SET attempts = attempts + 1, sending_until = :until
WHERE dedupe_key = :dedupe_key AND interrupt_id IS NULL
"""

RECORD_OPENED = """
UPDATE vigilator_requests SET interrupt_id = :interrupt_id, opened_at = :now,
       sending_until = NULL
WHERE dedupe_key = :dedupe_key AND interrupt_id IS NULL
"""

RELEASE_SEND = "UPDATE vigilator_requests SET sending_until = NULL WHERE dedupe_key = :dedupe_key"

KNOWN_IDS = """
SELECT interrupt_id FROM vigilator_requests
WHERE external_id = :external_id AND interrupt_id IS NOT NULL
"""


@dataclass(frozen=True)
class VigilatorRequest:
    """A recorded create: the body first recorded is the one every retry sends."""

    dedupe_key: str
    external_id: str
    body: dict[str, Any]
    attempts: int
    interrupt_id: str | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> VigilatorRequest:
        return cls(
            dedupe_key=row["dedupe_key"],
            external_id=row["external_id"],
            body=json.loads(row["body"]),
            attempts=row["attempts"],
            interrupt_id=row["interrupt_id"],
        )


class VigilatorRequests:
    """A database's recorded Vigilator creates (``store.tables.vigilator()``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def record(
        self, *, dedupe_key: str, external_id: str, body: dict[str, Any], now: float
    ) -> None:
        """Record a create once per pause; a later call for the same key keeps the first body."""
        params = {"dedupe_key": dedupe_key, "external_id": external_id, "now": now}
        self._db.execute(INSERT_REQUEST, {**params, "body": json.dumps(body)})

    def get(self, dedupe_key: str) -> VigilatorRequest:
        """The recorded create, which must exist (:meth:`record` came first)."""
        return VigilatorRequest.from_row(self._db.row(GET_REQUEST, {"dedupe_key": dedupe_key}))

    def find(self, dedupe_key: str) -> VigilatorRequest | None:
        row = self._db.one(GET_REQUEST, {"dedupe_key": dedupe_key})
        return None if row is None else VigilatorRequest.from_row(row)

    def take_send(self, dedupe_key: str, *, now: float, until: float) -> bool:
        """True if this caller may send the create; nobody else may until ``until``."""
        params = {"dedupe_key": dedupe_key, "now": now, "until": until}
        return self._db.execute(TAKE_SEND, params) == 1

    def count_attempt(self, dedupe_key: str, *, until: float) -> None:
        self._db.execute(COUNT_ATTEMPT, {"dedupe_key": dedupe_key, "until": until})

    def record_opened(self, dedupe_key: str, interrupt_id: str, *, now: float) -> bool:
        """False when another process recorded an interrupt for this create first."""
        params = {"dedupe_key": dedupe_key, "interrupt_id": interrupt_id, "now": now}
        return self._db.execute(RECORD_OPENED, params) == 1

    def release_send(self, dedupe_key: str) -> None:
        self._db.execute(RELEASE_SEND, {"dedupe_key": dedupe_key})

    def known_interrupt_ids(self, external_id: str) -> set[str]:
        """The interrupts already recorded for a thread's pauses: not candidates for another."""
        rows = self._db.all(KNOWN_IDS, {"external_id": external_id})
        return {r["interrupt_id"] for r in rows}
