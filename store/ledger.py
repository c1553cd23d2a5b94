"""The refunds ledger: the downstream system the refund tool writes to.

Every refund carries an idempotency key under a unique constraint, the way a payment API honours
an idempotency header: a retried write finds the first one and returns it instead of paying twice.
"""

from __future__ import annotations

import time
import uuid
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from store.db import Database

INSERT_REFUND = """
INSERT INTO refunds (refund_id, idempotency_key, thread_id, order_id, amount_cents, reason,
                     created_at)
VALUES (:refund_id, :idempotency_key, :thread_id, :order_id, :amount_cents, :reason, :now)
ON CONFLICT (idempotency_key) DO NOTHING
"""

REFUND_BY_KEY = "SELECT * FROM refunds WHERE idempotency_key = :idempotency_key"

REFUNDS_FOR_THREAD = "SELECT * FROM refunds WHERE thread_id = :thread_id ORDER BY created_at"

ALL_REFUNDS = "SELECT * FROM refunds ORDER BY created_at"


def to_cents(amount: float | str | Decimal) -> int:
    return int((Decimal(str(amount)) * 100).quantize(Decimal("1"), rounding=ROUND_HALF_UP))


class Ledger:
    def __init__(self, db: Database, clock=time.time):
        self.db = db
        self.clock = clock

    def issue_refund(
        self, *, idempotency_key: str, thread_id: str, order_id: str, amount: float, reason: str
    ) -> dict[str, Any]:
        """Write the refund once per key; return the stored row (the first one on a retry)."""
        with self.db.transaction() as tx:
            tx.execute(
                INSERT_REFUND,
                {
                    "refund_id": "rf_" + uuid.uuid4().hex[:12],
                    "idempotency_key": idempotency_key,
                    "thread_id": thread_id,
                    "order_id": order_id,
                    "amount_cents": to_cents(amount),
                    "reason": reason,
                    "now": self.clock(),
                },
            )
            return tx.one(REFUND_BY_KEY, {"idempotency_key": idempotency_key})

    def refunds(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        if thread_id is None:
            return self.db.all(ALL_REFUNDS)
        return self.db.all(REFUNDS_FOR_THREAD, {"thread_id": thread_id})
