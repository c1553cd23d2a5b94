"""Signed webhook deliveries already handled, by ``svix-id``, so a replayed or redelivered one
changes nothing and records nothing. Svix retries one message for about 27.5 hours with the same
id (and a fresh timestamp, which passes the 5-minute tolerance), so ids are kept for three days.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from store.db import Database, Tx
from store.trail import append_event

KEEP_SECONDS = 3 * 86400

SEEN = "SELECT 1 AS seen FROM webhook_deliveries WHERE source = :source AND message_id = :id"
REMEMBER = """
INSERT INTO webhook_deliveries (source, message_id, received_at) VALUES (:source, :id, :now)
ON CONFLICT (source, message_id) DO NOTHING
"""
FORGET_OLD = "DELETE FROM webhook_deliveries WHERE received_at < :before"


class Deliveries:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db = db
        self.clock = clock

    def seen(self, source: str, message_id: str) -> bool:
        return self.db.one(SEEN, {"source": source, "id": message_id}) is not None

    def remember(self, tx: Tx, source: str, message_id: str) -> bool:
        """Remember a delivery in the caller's transaction; False if it was already known."""
        params = {"source": source, "id": message_id, "now": self.clock()}
        return tx.execute(REMEMBER, params) == 1

    def remember_now(self, source: str, message_id: str) -> bool:
        """Remember a delivery on its own, once whatever it caused has committed (or nothing
        did: a refused answer is not retried by a redelivery either)."""
        with self.db.transaction() as tx:
            return self.remember(tx, source, message_id)

    def record(
        self, source: str, message_id: str, thread_id: str, actor: str, reason: str, detail: Any
    ) -> bool:
        """Remember a delivery that only informs, and put it on the thread's trail, together:
        a redelivery is neither recorded twice nor lost between the two. False if known."""
        with self.db.transaction() as tx:
            if not self.remember(tx, source, message_id):
                return False
            append_event(tx, thread_id, self.clock(), actor, reason, detail)
        return True

    def forget_old(self) -> int:
        return self.db.execute(FORGET_OLD, {"before": self.clock() - KEEP_SECONDS})
