"""The ledgers the tools write to: refunds and purchase orders (the downstream systems).

Every write carries an idempotency key under a unique constraint, the way a payment API honours
an idempotency header: a retried write finds the first one and returns it instead of paying twice.

The business limits hold here too, under concurrency: an order's refunds stay within its total
and a cost center's orders within its budget. Each has one balance row, created on first use
from the ledger, and a write moves it with a conditional ``UPDATE ... WHERE`` in the same
transaction as the write (Postgres locks the row and re-checks the condition; SQLite has one
writer), so ten runs refunding one order at once cannot all pass a read-then-write check.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal
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

LAST_REFUND_FOR_ORDER = """
SELECT * FROM refunds WHERE order_id = :order_id ORDER BY created_at DESC LIMIT 1
"""

# A run waiting on a request to refund the order (the request is stored as ``json.dumps``).
OPEN_REFUND_REQUESTS = """
SELECT thread_id FROM runs
WHERE status = 'waiting' AND workflow = 'refund' AND thread_id <> :thread_id
  AND request LIKE :pattern
ORDER BY created_at LIMIT 3
"""

OPEN_ORDER_BALANCE = """
INSERT INTO order_balances (order_id, total_cents, refunded_cents)
VALUES (:order_id, :total_cents,
        (SELECT COALESCE(SUM(amount_cents), 0) FROM refunds WHERE order_id = :order_id))
ON CONFLICT (order_id) DO NOTHING
"""

TAKE_FROM_ORDER = """
UPDATE order_balances SET refunded_cents = refunded_cents + :amount_cents
WHERE order_id = :order_id AND refunded_cents + :amount_cents <= total_cents
"""

OPEN_BUDGET_BALANCE = """
INSERT INTO budget_balances (cost_center, budget_cents, committed_cents)
VALUES (:cost_center, :budget_cents,
        (SELECT COALESCE(SUM(total_cents), 0) FROM purchase_orders
         WHERE cost_center = :cost_center))
ON CONFLICT (cost_center) DO NOTHING
"""

TAKE_FROM_BUDGET = """
UPDATE budget_balances SET committed_cents = committed_cents + :total_cents
WHERE cost_center = :cost_center AND committed_cents + :total_cents <= budget_cents
"""

COMMITTED_FOR_COST_CENTER = """
SELECT COALESCE(SUM(total_cents), 0) AS committed FROM purchase_orders
WHERE cost_center = :cost_center
"""


class OverLimit(Exception):
    """The write would take an order past its total or a cost center past its budget; the
    transaction is rolled back and nothing is written."""


CLEAR = (
    "DELETE FROM refunds",
    "DELETE FROM order_balances",
    "DELETE FROM purchase_orders",
    "DELETE FROM budget_balances",
)


def to_cents(amount: str | Decimal | int) -> int:
    """Whole cents of an amount; a fraction of a cent is refused (ValueError), never rounded
    into a payment nobody approved."""
    cents = Decimal(str(amount)) * 100
    if cents != cents.to_integral_value():
        raise ValueError(f"{amount} has a fraction of a cent")
    return int(cents)


# The demo's stand-in for an external system (a payment API): its own SQL, outside store/.
class Ledger:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db = db
        self.clock = clock

    def issue_refund(
        self,
        *,
        idempotency_key: str,
        thread_id: str,
        order_id: str,
        amount: Decimal,
        reason: str,
        order_total: Decimal,
    ) -> dict[str, Any] | None:
        """Write the refund once per key and return the stored row (the first one on a retry),
        or None when it would take the order's refunds past ``order_total``."""
        cents = to_cents(amount)
        try:
            with self.db.transaction() as tx:
                balance = {"order_id": order_id, "total_cents": to_cents(order_total)}
                tx.execute(OPEN_ORDER_BALANCE, balance)  # before this refund exists
                written = tx.execute(
                    INSERT_REFUND,
                    {
                        "refund_id": "rf_" + uuid.uuid4().hex[:12],
                        "idempotency_key": idempotency_key,
                        "thread_id": thread_id,
                        "order_id": order_id,
                        "amount_cents": cents,
                        "reason": reason,
                        "now": self.clock(),
                    },
                )
                # a new refund moves the balance, or nothing is written; a retry (the key's
                # unique index made it wait for the first) finds the first refund
                take = {"order_id": order_id, "amount_cents": cents}
                if written == 1 and tx.execute(TAKE_FROM_ORDER, take) != 1:
                    raise OverLimit
                return tx.row(REFUND_BY_KEY, {"idempotency_key": idempotency_key})
        except OverLimit:
            return None

    def clear(self) -> None:
        """Start the demo's books over: its five orders and three cost centers are finite, and
        tests that share one database each want them whole."""
        with self.db.transaction() as tx:
            for statement in CLEAR:
                tx.execute(statement)

    def refund(self, idempotency_key: str) -> dict[str, Any] | None:
        return self.db.one(REFUND_BY_KEY, {"idempotency_key": idempotency_key})

    def refunded_total(self, order_id: str) -> Decimal:
        """What the refunds ledger already holds for the order: an order's refunds together
        stay within its total (the one read the review check and the refund tool share).
        Inside :func:`totals_remembered`, read once per order."""
        memo = _TOTALS.get()
        if memo is not None and order_id in memo:
            return memo[order_id]
        row = self.db.one(REFUNDED_FOR_ORDER, {"order_id": order_id})
        total = Decimal(int(row["refunded"]) if row else 0) / 100
        if memo is not None:
            memo[order_id] = total
        return total

    def last_refund(self, order_id: str) -> dict[str, Any] | None:
        return self.db.one(LAST_REFUND_FOR_ORDER, {"order_id": order_id})

    def open_refund_requests(self, order_id: str, thread_id: str) -> list[str]:
        """Other runs waiting on a reviewer to refund the order (at most three named)."""
        pattern = "%" + json.dumps({"order_id": order_id})[1:-1] + "%"
        rows = self.db.all(OPEN_REFUND_REQUESTS, {"thread_id": thread_id, "pattern": pattern})
        return [r["thread_id"] for r in rows]

    def refunds(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        if thread_id is None:
            return self.db.all(ALL_REFUNDS)
        return self.db.all(REFUNDS_FOR_THREAD, {"thread_id": thread_id})

    def create_purchase_order(
        self,
        *,
        idempotency_key: str,
        thread_id: str,
        cost_center: str,
        supplier_id: str,
        item: str,
        quantity: int,
        unit_price: Decimal,
        justification: str,
        budget: Decimal,
    ) -> dict[str, Any] | None:
        """Place the order once per key and return the stored row (the first one on a retry),
        or None when it would take the cost center's orders past ``budget``."""
        unit_cents = to_cents(unit_price)
        total = unit_cents * quantity
        try:
            with self.db.transaction() as tx:
                balance = {"cost_center": cost_center, "budget_cents": to_cents(budget)}
                tx.execute(OPEN_BUDGET_BALANCE, balance)  # before this order exists
                written = tx.execute(
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
                        "total_cents": total,
                        "justification": justification,
                        "now": self.clock(),
                    },
                )
                take = {"cost_center": cost_center, "total_cents": total}
                if written == 1 and tx.execute(TAKE_FROM_BUDGET, take) != 1:
                    raise OverLimit
                return tx.row(PURCHASE_ORDER_BY_KEY, {"idempotency_key": idempotency_key})
        except OverLimit:
            return None

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


_TOTALS: ContextVar[dict[str, Decimal] | None] = ContextVar("refunded_totals", default=None)


@contextmanager
def totals_remembered() -> Iterator[None]:
    """Read each order's refunded total once while the block runs (a page describing many
    requests for the same few orders: one read per order, not per row). Never around a check
    or a refund, which must see the ledger as it is."""
    token = _TOTALS.set({})
    try:
        yield
    finally:
        _TOTALS.reset(token)
