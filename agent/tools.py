"""The tools the agents call, with their argument schemas; each workflow's policy says which
need a human (:mod:`agent.policy`).

Argument models are pydantic: they give the JSON schema shown to reviewers (and to the model) and
validate the arguments actually executed, edited ones included. Tools that write go through the
ledger with an idempotency key built from the thread and the tool-call id, so a retried segment
finds the first write instead of making a second one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agent.ledger import Ledger, to_cents
from core.faults import fault
from store.receipts import Receipts

DATA = Path(__file__).parent / "data"
ORDERS_FILE = DATA / "orders.json"
BUDGETS_FILE = DATA / "budgets.json"
SUPPLIERS_FILE = DATA / "suppliers.json"


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

    @property
    def args_schema(self) -> dict:
        return self.args_model.model_json_schema()


@cache
def demo_orders() -> dict[str, dict]:
    return json.loads(ORDERS_FILE.read_text(), parse_float=Decimal)


@cache
def demo_budgets() -> dict[str, dict]:
    return json.loads(BUDGETS_FILE.read_text(), parse_float=Decimal)


@cache
def demo_suppliers() -> dict[str, dict]:
    return json.loads(SUPPLIERS_FILE.read_text(), parse_float=Decimal)


class LookupOrderArgs(BaseModel):
    order_id: str = Field(description="Order number, e.g. A-1001")


class IssueRefundArgs(BaseModel):
    order_id: str = Field(description="Order number, e.g. A-1001")
    amount: Decimal = Field(gt=0, description="Amount to refund, in the order's currency")
    reason: str = Field(min_length=1, description="Why the customer is refunded")


def amount_text(value: Decimal | int | str) -> str:
    """Money as a tool result carries it: exact decimal text with cents (``"49.90"``), never a
    JSON float (the model and the reviewer read the same digits)."""
    return f"{Decimal(str(value)).quantize(Decimal('0.01')):f}"


def cents_text(cents: int) -> str:
    return f"{Decimal(cents).scaleb(-2):f}"


def lookup_order(ctx: ToolContext, args: LookupOrderArgs) -> dict:
    order = demo_orders().get(args.order_id)
    if order is None:
        return {"error": f"no order {args.order_id}"}
    refunded = ctx.ledger.refunded_total(args.order_id)
    left = max(Decimal(str(order["total"])) - refunded, Decimal(0))
    return {
        "order_id": args.order_id,
        **order,
        "total": amount_text(order["total"]),
        "refunded": amount_text(refunded),
        "refundable": amount_text(left),
    }


def refundable(ledger: Ledger, order_id: str) -> Decimal | None:
    """What is still refundable on the order (None: no such order)."""
    order = demo_orders().get(order_id)
    if order is None:
        return None
    return max(Decimal(str(order["total"])) - ledger.refunded_total(order_id), Decimal(0))


def refund_problem(ledger: Ledger, args: IssueRefundArgs) -> str | None:
    """Why the refund cannot be issued as proposed, or None; the policy asks before a reviewer
    sees it, and the tool asks again (the ledger's conditional write has the last word)."""
    left = refundable(ledger, args.order_id)
    if left is None:
        return f"no order {args.order_id}"
    if to_cents(args.amount) > to_cents(left):
        total = demo_orders()[args.order_id]["total"]
        return (
            f"amount {args.amount:.2f} exceeds what is still refundable on {args.order_id}: "
            f"{left:.2f} of its total {total:.2f}"
        )
    return None


def issue_refund(ctx: ToolContext, args: IssueRefundArgs) -> dict:
    def refund(key: str) -> dict:
        row = ctx.ledger.refund(key)  # a retry returns the refund already made
        if row is None:
            problem = refund_problem(ctx.ledger, args)
            if problem:
                return {"error": problem}
            row = ctx.ledger.issue_refund(
                idempotency_key=key,
                thread_id=ctx.thread_id,
                order_id=args.order_id,
                amount=args.amount,
                reason=args.reason,
                order_total=demo_orders()[args.order_id]["total"],
            )
        if row is None:  # another run refunded the order meanwhile
            left = refundable(ctx.ledger, args.order_id) or Decimal(0)
            return {
                "error": f"amount {args.amount:.2f} exceeds what is still refundable on "
                f"{args.order_id}: {left:.2f}"
            }
        order = demo_orders()[row["order_id"]]
        fault("tool.after-write")
        return {
            "status": "refunded",
            "refund_id": row["refund_id"],
            "order_id": row["order_id"],
            "amount": cents_text(row["amount_cents"]),
            "currency": order["currency"],
        }

    return ctx.once("issue_refund", refund)


REFUND_TOOLS = (
    Tool("lookup_order", "Look up an order by its number.", LookupOrderArgs, lookup_order),
    Tool(
        "issue_refund",
        "Refund money to the customer of an order. A reviewer may have to approve it first.",
        IssueRefundArgs,
        issue_refund,
    ),
)


# -- purchase orders ----------------------------------------------------------------------------


class CheckBudgetArgs(BaseModel):
    cost_center: str = Field(description="Cost center code, e.g. CC-100")


class FindSupplierArgs(BaseModel):
    item: str = Field(min_length=1, description="What to buy, e.g. toner cartridge")


class CreatePurchaseOrderArgs(BaseModel):
    cost_center: str = Field(description="Cost center that pays, e.g. CC-100")
    supplier_id: str = Field(description="Supplier id from find_supplier, e.g. SUP-01")
    item: str = Field(min_length=1, description="The item, as the supplier lists it")
    quantity: int = Field(gt=0, description="How many units")
    unit_price: Decimal = Field(gt=0, description="Price per unit, in the supplier's currency")
    justification: str = Field(min_length=1, description="Why the purchase is needed")


def catalog_name(item: str) -> str:
    """The catalog's spelling of ``item``: lower case, a plural ``s`` dropped if that matches."""
    name = " ".join(item.lower().split())
    known = {i for s in demo_suppliers().values() for i in s["items"]}
    if name not in known and name.endswith("s") and name[:-1] in known:
        return name[:-1]
    return name


def check_budget(ctx: ToolContext, args: CheckBudgetArgs) -> dict:
    budget = demo_budgets().get(args.cost_center)
    if budget is None:
        return {"error": f"no cost center {args.cost_center}"}
    committed = ctx.ledger.committed_cents(args.cost_center)
    return {
        "cost_center": args.cost_center,
        "name": budget["name"],
        "budget": amount_text(budget["budget"]),
        "committed": cents_text(committed),
        "remaining": cents_text(to_cents(budget["budget"]) - committed),
        "currency": budget["currency"],
    }


def find_supplier(ctx: ToolContext, args: FindSupplierArgs) -> dict:
    item = catalog_name(args.item)
    offers = sorted(
        (s["items"][item], sid, s) for sid, s in demo_suppliers().items() if item in s["items"]
    )
    if not offers:
        return {"error": f"no supplier lists {args.item!r}"}
    price, sid, supplier = offers[0]
    return {
        "item": item,
        "supplier_id": sid,
        "supplier": supplier["name"],
        "unit_price": amount_text(price),
        "currency": supplier["currency"],
        "other_offers": [
            {"supplier_id": o[1], "unit_price": amount_text(o[0])} for o in offers[1:]
        ],
    }


def create_purchase_order(ctx: ToolContext, args: CreatePurchaseOrderArgs) -> dict:
    def place(key: str) -> dict:
        placed = ctx.ledger.purchase_order(key)
        if placed is None:
            problem = purchase_order_problem(ctx.ledger, args)
            if problem:
                return {"error": problem}
            placed = ctx.ledger.create_purchase_order(
                idempotency_key=key,
                thread_id=ctx.thread_id,
                cost_center=args.cost_center,
                supplier_id=args.supplier_id,
                item=catalog_name(args.item),
                quantity=args.quantity,
                unit_price=args.unit_price,
                justification=args.justification,
                budget=demo_budgets()[args.cost_center]["budget"],
            )
            if placed is None:  # another run committed the budget meanwhile
                return {"error": purchase_order_problem(ctx.ledger, args) or "over budget"}
        fault("tool.after-write")
        supplier = demo_suppliers()[placed["supplier_id"]]
        return {
            "status": "ordered",
            "po_id": placed["po_id"],
            "supplier": supplier["name"],
            "item": placed["item"],
            "quantity": placed["quantity"],
            "total": cents_text(placed["total_cents"]),
            "currency": supplier["currency"],
            "cost_center": placed["cost_center"],
        }

    return ctx.once("create_purchase_order", place)


def purchase_order_problem(ledger: Ledger, args: CreatePurchaseOrderArgs) -> str | None:
    """Why the order cannot be placed as proposed, or None; asked before a reviewer sees it
    and again by the tool. Checked only before the first write: a retry must return the order
    already placed, even though that order now counts against the budget it was checked
    against."""
    budget = demo_budgets().get(args.cost_center)
    if budget is None:
        return f"no cost center {args.cost_center}"
    supplier = demo_suppliers().get(args.supplier_id)
    if supplier is None:
        return f"no supplier {args.supplier_id}"
    if catalog_name(args.item) not in supplier["items"]:
        return f"{supplier['name']} does not list {args.item!r}"
    total = to_cents(args.unit_price) * args.quantity
    remaining = to_cents(budget["budget"]) - ledger.committed_cents(args.cost_center)
    if total > remaining:
        return (
            f"total {total / 100:.2f} exceeds the remaining budget {remaining / 100:.2f} "
            f"of {args.cost_center}"
        )
    return None


PURCHASE_ORDER_TOOLS = (
    Tool(
        "check_budget",
        "Show a cost center's budget, what is already committed and what remains.",
        CheckBudgetArgs,
        check_budget,
    ),
    Tool(
        "find_supplier",
        "Find the cheapest supplier for an item, with its unit price.",
        FindSupplierArgs,
        find_supplier,
    ),
    Tool(
        "create_purchase_order",
        "Place a purchase order with a supplier, charged to a cost center. "
        "A reviewer may have to approve it first.",
        CreatePurchaseOrderArgs,
        create_purchase_order,
    ),
)
