"""The tools the agents call, with their argument schemas and whether a human must approve them.

Argument models are pydantic: they give the JSON schema shown to reviewers (and to the model) and
validate the arguments actually executed, edited ones included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from store.faults import fault
from store.ledger import Ledger
from store.receipts import Receipts

ORDERS_FILE = Path(__file__).parent / "data" / "orders.json"


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use besides its arguments; the ids make idempotency keys stable."""

    thread_id: str
    tool_call_id: str
    ledger: Ledger
    receipts: Receipts

    def once(self, tool: str, act: Callable[[str], dict]) -> dict:
        """Run a side effect through a receipt keyed by thread, tool call and tool; ``act``
        gets the key to hand downstream (the ledger's unique idempotency key)."""
        key = f"{self.thread_id}:{self.tool_call_id}:{tool}:v1"
        return self.receipts.once(key, thread_id=self.thread_id, tool=tool, act=lambda: act(key))


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args_model: type[BaseModel]
    run: Callable[[ToolContext, Any], dict]
    needs_approval: bool = False

    @property
    def args_schema(self) -> dict:
        return self.args_model.model_json_schema()


@cache
def demo_orders() -> dict[str, dict]:
    return json.loads(ORDERS_FILE.read_text())


class LookupOrderArgs(BaseModel):
    order_id: str = Field(description="Order number, e.g. A-1001")


class IssueRefundArgs(BaseModel):
    order_id: str = Field(description="Order number, e.g. A-1001")
    amount: float = Field(gt=0, description="Amount to refund, in the order's currency")
    reason: str = Field(min_length=1, description="Why the customer is refunded")


def lookup_order(ctx: ToolContext, args: LookupOrderArgs) -> dict:
    order = demo_orders().get(args.order_id)
    if order is None:
        return {"error": f"no order {args.order_id}"}
    return {"order_id": args.order_id, **order}


def issue_refund(ctx: ToolContext, args: IssueRefundArgs) -> dict:
    order = demo_orders().get(args.order_id)
    if order is None:
        return {"error": f"no order {args.order_id}"}
    if args.amount > order["total"]:
        return {"error": f"amount {args.amount:.2f} exceeds the order total {order['total']:.2f}"}

    def refund(key: str) -> dict:
        row = ctx.ledger.issue_refund(
            idempotency_key=key,
            thread_id=ctx.thread_id,
            order_id=args.order_id,
            amount=args.amount,
            reason=args.reason,
        )
        fault("tool.after-write")
        return {
            "status": "refunded",
            "refund_id": row["refund_id"],
            "order_id": row["order_id"],
            "amount": row["amount_cents"] / 100,
            "currency": order["currency"],
        }

    return ctx.once("issue_refund", refund)


REFUND_TOOLS = (
    Tool("lookup_order", "Look up an order by its number.", LookupOrderArgs, lookup_order),
    Tool(
        "issue_refund",
        "Refund money to the customer of an order. Needs a reviewer's approval.",
        IssueRefundArgs,
        issue_refund,
        needs_approval=True,
    ),
)
