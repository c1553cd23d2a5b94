"""The ledgers the tools write to: refunds and purchase orders (the downstream systems).

Every write carries an idempotency key under a unique constraint, the way a payment API honours
an idempotency header: a retried write finds the first one and returns it instead of paying twice.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
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

INSERT_PURCHASE_ORDER = """
INSERT INTO purchase_orders (po_id, idempotency_key, thread_id, cost_center, supplier_id, item,
                             quantity, unit_price_cents, total_cents, justification, created_at)
VALUES (:po_id, :idempotency_key, :thread_id, :cost_center, :supplier_id, :item, :quantity,
        :unit_price_cents, :total_cents, :justification, :now)
ON CONFLICT (idempotency_key) DO NOTHING
"""

PURCHASE_ORDER_BY_KEY = "SELECT * FROM purchase_orders WHERE idempotency_key = :idempotency_key"

PURCHASE_ORDERS_FOR_THREAD = """
SELECT * FROM purchase_orders WHERE thread_id = :thread_id ORDER BY created_at
"""

ALL_PURCHASE_ORDERS = "SELECT * FROM purchase_orders ORDER BY created_at"

REFUNDED_FOR_ORDER = """
SELECT COALESCE(SUM(amount_cents), 0) AS refunded FROM refunds WHERE order_id = :order_id
"""

COMMITTED_FOR_COST_CENTER = """
SELECT COALESCE(SUM(total_cents), 0) AS committed FROM purchase_orders
WHERE cost_center = :cost_center
"""


def to_cents(amount: float | str | Decimal) -> int:
    return int((Decimal(str(amount)) * 100).quantize(Decimal("1"), rounding=ROUND_HALF_UP))


class Ledger:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
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
            return tx.row(REFUND_BY_KEY, {"idempotency_key": idempotency_key})

    def refunds(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        if thread_id is None:
            return self.db.all(ALL_REFUNDS)
        return self.db.all(REFUNDS_FOR_THREAD, {"thread_id": thread_id})

    def refunded_total(self, order_id: str) -> Decimal:
        """What the refunds ledger already holds for the order: an order's refunds together
        stay within its total (the one read the review check and the refund tool share)."""
        row = self.db.one(REFUNDED_FOR_ORDER, {"order_id": order_id})
        return Decimal(int(row["refunded"]) if row else 0) / 100

    def create_purchase_order(
        self,
        *,
        idempotency_key: str,
        thread_id: str,
        cost_center: str,
        supplier_id: str,
        item: str,
        quantity: int,
        unit_price: float,
        justification: str,
    ) -> dict[str, Any]:
        """Place the order once per key; return the stored row (the first one on a retry)."""
        unit_cents = to_cents(unit_price)
        with self.db.transaction() as tx:
            tx.execute(
                INSERT_PURCHASE_ORDER,
                {
                    "po_id": "po_" + uuid.uuid4().hex[:12],
                    "idempotency_key": idempotency_key,
                    "thread_id": thread_id,
                    "cost_center": cost_center,
                    "supplier_id": supplier_id,
                    "item": item,
                    "quantity": quantity,
                    "unit_price_cents": unit_cents,
                    "total_cents": unit_cents * quantity,
                    "justification": justification,
                    "now": self.clock(),
                },
            )
            return tx.row(PURCHASE_ORDER_BY_KEY, {"idempotency_key": idempotency_key})

    def purchase_order(self, idempotency_key: str) -> dict[str, Any] | None:
        return self.db.one(PURCHASE_ORDER_BY_KEY, {"idempotency_key": idempotency_key})

    def purchase_orders(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        if thread_id is None:
            return self.db.all(ALL_PURCHASE_ORDERS)
        return self.db.all(PURCHASE_ORDERS_FOR_THREAD, {"thread_id": thread_id})

    def committed_cents(self, cost_center: str) -> int:
        """What the cost center has already ordered, so budget checks see earlier orders."""
        row = self.db.one(COMMITTED_FOR_COST_CENTER, {"cost_center": cost_center})
        return int(row["committed"]) if row else 0
