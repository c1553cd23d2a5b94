"""The demo workflows in business terms, for reviewers: what each proposed call means (who is
refunded how much of which order, what is ordered from whom against which budget) and whether an
edited call still makes sense for the business (refundable, within budget, a known supplier).

The checks run when the decision is made (``check_edit``, on the one decision path), so a bad
edit is refused at the form with nothing changed instead of failing later in the run. The refund
tool checks again when it runs: the ledger may have moved in between.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from agent.ledger import Ledger
from agent.tools import catalog_name, demo_budgets, demo_orders, demo_suppliers
from core.errors import UserError
from core.hitl import ActionRequest
from core.money import AmountError, exact
from inbox.views import ActionView, ViewField, generic_view, money, value_text


def _dec(value: Any, currency: str = "EUR") -> Decimal:
    """A figure to show in the currency's decimals (``540.00``) when that is exact; as it is
    otherwise: display never rounds it into another amount."""
    try:
        return exact(value, currency)
    except AmountError:
        pass
    try:
        return Decimal(str(value))
    except ArithmeticError:
        return Decimal(0)


def _exact(name: str, value: Any, currency: str) -> Decimal:
    """An approved amount as the business will pay it: more decimals than the currency has
    is refused beside its field, never rounded."""
    try:
        return exact(value, currency)
    except AmountError as exc:
        raise UserError(f"{name}: {exc}") from None


def _refunded(ledger: Ledger | None, order_id: str) -> Decimal:
    return ledger.refunded_total(order_id) if ledger is not None else Decimal("0.00")


_NOTE = "Review needed: "  # how the graph tells the reviewer what the ledger holds (agent.graph)
_RUN_IDS = re.compile(r" by run [^\s,.;]+| ?\(runs? [^)]*\)")


def _warning(ledger: Ledger | None, action: ActionRequest, check: Any) -> str | None:
    """What the reviewer must know before approving: the policy's note from when it was
    proposed (run ids left out) and, as the business stands now, why approving it would be
    refused."""
    said = []
    description = action.description or ""
    if _NOTE in description:
        said.append(_RUN_IDS.sub("", description.partition(_NOTE)[2]).strip())
    try:
        check(ledger, action.name, action.args)
    except UserError as exc:
        said.append("Approving it is refused: " + re.sub(r"^\w+: ", "", str(exc)) + ".")
    return " ".join(s for s in said if s) or None


def describe_refund(ledger: Ledger | None, action: ActionRequest) -> ActionView:
    args = action.args
    order_id = str(args.get("order_id", ""))
    order = demo_orders().get(order_id)
    if order is None:
        return generic_view(action)
    cur = order["currency"]
    total, refunded = _dec(order["total"], cur), _refunded(ledger, order_id)
    context = (
        ViewField("Customer", order["customer"]),
        ViewField("Item", order["item"]),
        ViewField("Order total", money(total, cur)),
        ViewField("Refunded so far", money(refunded, cur)),
        ViewField("Still refundable", money(max(total - refunded, Decimal(0)), cur)),
    )
    if action.name == "lookup_order":
        summary = f"Look up order {order_id} ({order['customer']}, {order['item']})"
        return ActionView(summary, (ViewField("Order", order_id, "order_id"),), context=context)
    amount = _dec(args.get("amount", 0), cur)
    # the summary holds what does not change; what the ledger holds now is in the context
    summary = (
        f"Refund {money(amount, cur)} to {order['customer']} for order {order_id}, "
        f"{order['item']}, order total {money(total, cur)}"
    )
    fields = (
        ViewField("Order", order_id, "order_id"),
        ViewField("Amount", money(amount, cur), "amount", cur),
        ViewField("Reason", value_text(args.get("reason")), "reason"),
    )
    return ActionView(summary, fields, amount, cur, context, _warning(ledger, action, check_refund))


def check_refund(ledger: Ledger | None, tool: str, args: dict[str, Any]) -> None:
    if tool != "issue_refund":
        return
    order_id = str(args.get("order_id", ""))
    order = demo_orders().get(order_id)
    if order is None:
        raise UserError(f"there is no order {order_id}")
    cur = order["currency"]
    total, refunded = _dec(order["total"], cur), _refunded(ledger, order_id)
    left = total - refunded
    amount = _exact("amount", args.get("amount", 0), cur)
    if amount <= 0:
        raise UserError("amount: enter an amount above zero")
    if amount > left:
        raise UserError(
            f"amount: {money(amount, cur)} is more than is still refundable on order "
            f"{order_id}: {money(left, cur)} (order total {money(total, cur)}, refunded so far "
            f"{money(refunded, cur)})"
        )


def _budget_left(ledger: Ledger | None, cost_center: str) -> Decimal | None:
    budget = demo_budgets().get(cost_center)
    if budget is None:
        return None
    committed = Decimal(ledger.committed_cents(cost_center) if ledger else 0) / 100
    return _dec(budget["budget"], budget.get("currency", "EUR")) - committed


def describe_purchase(ledger: Ledger | None, action: ActionRequest) -> ActionView:
    args = action.args
    cost_center = str(args.get("cost_center", ""))
    budget = demo_budgets().get(cost_center)
    if action.name == "check_budget" and budget is not None:
        summary = f"Check the budget of {cost_center} {budget['name']}"
        return ActionView(summary, (ViewField("Cost center", cost_center, "cost_center"),))
    if action.name != "create_purchase_order":
        return generic_view(action)
    supplier = demo_suppliers().get(str(args.get("supplier_id", "")))
    cur = (supplier or budget or {}).get("currency", "EUR")
    quantity = int(args.get("quantity") or 0)
    unit = _dec(args.get("unit_price", 0), cur)
    total = unit * quantity
    left = _budget_left(ledger, cost_center)
    supplier_name = supplier["name"] if supplier else f"unknown supplier {args.get('supplier_id')}"
    center = f"{cost_center} {budget['name']}" if budget else f"unknown cost center {cost_center}"
    left_text = money(left, cur) if left is not None else "unknown"
    summary = (
        f"Order {quantity} × {args.get('item')} from {supplier_name} for {money(total, cur)}, "
        f"charged to {center}"
    )
    fields = (
        ViewField("Cost center", center, "cost_center"),
        ViewField("Supplier", supplier_name, "supplier_id"),
        ViewField("Item", value_text(args.get("item")), "item"),
        ViewField("Quantity", str(quantity), "quantity"),
        ViewField("Unit price", money(unit, cur), "unit_price", cur),
        ViewField("Justification", value_text(args.get("justification")), "justification"),
    )
    context = (
        ViewField("Total", money(total, cur)),
        ViewField("Budget left", left_text),
    )
    return ActionView(
        summary, fields, total, cur, context, _warning(ledger, action, check_purchase)
    )


def derive_purchase(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments that follow from others, re-derived after an edit: the unit price is the
    chosen supplier's catalogue price for the item (a supplier that does not list it is left
    for :func:`check_purchase` to refuse). The total follows quantity and price in the view."""
    if tool != "create_purchase_order":
        return args
    supplier = demo_suppliers().get(str(args.get("supplier_id", "")))
    price = (supplier or {}).get("items", {}).get(catalog_name(str(args.get("item", ""))))
    if supplier is None or price is None:
        return args
    listed = _dec(price, supplier["currency"])
    same = _dec(args.get("unit_price", 0), supplier["currency"]) == listed
    return args if same else {**args, "unit_price": f"{listed:f}"}


def purchase_choices(tool: str) -> dict[str, list[tuple[str, str]]]:
    """The supplier is picked from the catalogue by name; anything else is refused."""
    if tool != "create_purchase_order":
        return {}
    suppliers = demo_suppliers()
    return {"supplier_id": [(sid, str(s["name"])) for sid, s in sorted(suppliers.items())]}


def check_purchase(ledger: Ledger | None, tool: str, args: dict[str, Any]) -> None:
    if tool != "create_purchase_order":
        return
    cost_center = str(args.get("cost_center", ""))
    left = _budget_left(ledger, cost_center)
    if left is None:
        raise UserError(f"cost_center: there is no cost center {cost_center}")
    supplier_id = str(args.get("supplier_id", ""))
    supplier = demo_suppliers().get(supplier_id)
    if supplier is None:
        raise UserError(f"supplier_id: {supplier_id} is not a known supplier")
    item = catalog_name(str(args.get("item", "")))
    if item not in supplier["items"]:
        raise UserError(f"supplier_id: {supplier['name']} does not list {args.get('item')}")
    cur = supplier["currency"]
    unit = _exact("unit_price", args.get("unit_price", 0), cur)
    listed = _dec(supplier["items"][item], cur)
    if unit != listed:
        raise UserError(
            f"unit_price: {supplier['name']} lists {item} at {money(listed, cur)}, not "
            f"{money(unit, cur)}: the price follows the supplier's catalogue"
        )
    total = unit * int(args.get("quantity") or 0)
    if total > left:
        raise UserError(
            f"quantity: the total {money(total, cur)} is more than the budget left on "
            f"{cost_center}: {money(left, cur)}"
        )
