"""Model adapters behind one interface: given the conversation and tools, return an AIMessage.

Claude (:mod:`agent.claude`) is used when ``ANTHROPIC_API_KEY`` is set; otherwise each workflow's
offline model, which is deterministic and needs no key, so the demo and the tests run anywhere.
Both see the same tools and the same tool results, and neither decides what needs a reviewer:
that is the policy's job, in the graph.
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal
from typing import Any, Protocol, cast

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agent.tools import Tool, demo_suppliers

ORDER_ID = re.compile(r"\b[A-Z]-\d{4}\b")
COST_CENTER = re.compile(r"\bCC-\d{3}\b")
REJECTED_PREFIX = "Rejected by the reviewer"


class ModelError(Exception):
    """The model could not produce a usable turn (API error after retries, malformed output).

    Its message is one line, safe to store on the run: never a key, never a request body.
    """


class ChatModel(Protocol):
    name: str

    def invoke(self, messages: list[BaseMessage], tools: list[Tool]) -> AIMessage: ...


def _calls(messages: list[BaseMessage], calls: list[tuple[str, dict]]) -> AIMessage:
    # Ids derived from the conversation: the same history always proposes the same calls.
    tool_calls = []
    for i, (name, args) in enumerate(calls):
        key = f"{len(messages)}:{i}:{name}:{json.dumps(args, sort_keys=True)}"
        call_id = "toolu_" + hashlib.sha256(key.encode()).hexdigest()[:24]
        tool_calls.append({"id": call_id, "name": name, "args": args})
    return AIMessage(content="", tool_calls=tool_calls)


def calls_of(ai: AIMessage) -> list[dict[str, Any]]:
    """A turn's tool calls as plain dicts (``id``, ``name``, ``args``)."""
    return cast(list[dict[str, Any]], ai.tool_calls)


def _last_turn(messages: list[BaseMessage]) -> tuple[AIMessage | None, list[ToolMessage]]:
    """The last model turn and its tool results, in the order the model made the calls."""
    for i in range(len(messages) - 1, -1, -1):
        ai = messages[i]
        if isinstance(ai, AIMessage):
            by_id = {m.tool_call_id: m for m in messages[i + 1 :] if isinstance(m, ToolMessage)}
            return ai, [by_id[tc["id"]] for tc in calls_of(ai) if tc["id"] in by_id]
    return None, []


def _request_text(messages: list[BaseMessage]) -> str:
    return str(next(m for m in reversed(messages) if isinstance(m, HumanMessage)).content)


def _reason(text: str) -> str:
    return text.split(":", 1)[1].strip() if ":" in text else text.strip()


def _payload(result: ToolMessage) -> dict | None:
    try:
        data = json.loads(str(result.content))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _rejection(result: ToolMessage) -> str | None:
    text = str(result.content)
    if result.status == "error" and text.startswith(REJECTED_PREFIX):
        return text.splitlines()[0].partition(":")[2].strip() or "no reason given"
    return None


def _money(value: object) -> Decimal:
    """An amount from a tool result (decimal text; a number from an older result)."""
    return Decimal(str(value))


def _edited_note(data: dict) -> str:
    return " A reviewer edited it before it ran." if "reviewer_edit" in data else ""


class OfflineRefundModel:
    """A scripted refund agent: look the orders up, propose the refunds, report the outcomes."""

    name = "offline (deterministic, no API key)"

    def invoke(self, messages: list[BaseMessage], tools: list[Tool]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            orders = list(dict.fromkeys(ORDER_ID.findall(str(last.content))))
            if not orders:
                return AIMessage(
                    content="Which order is this about? Please give its number, e.g. A-1001."
                )
            return _calls(messages, [("lookup_order", {"order_id": o}) for o in orders])
        ai, results = _last_turn(messages)
        if ai is None or not results:
            return AIMessage(content="I have nothing further to do.")
        if results[0].name == "lookup_order":
            found = [d for d in map(_payload, results) if d and "error" not in d]
            if not found:
                errors = "; ".join((_payload(r) or {}).get("error", "?") for r in results)
                return AIMessage(content=f"I could not find that order: {errors}.")
            done = [d["order_id"] for d in found if _money(d.get("refundable", d["total"])) <= 0]
            found = [d for d in found if d["order_id"] not in done]
            if not found:
                return AIMessage(content=f"{', '.join(done)} has been refunded in full already.")
            reason = _reason(_request_text(messages))
            return _calls(
                messages,
                [
                    (
                        "issue_refund",
                        {
                            "order_id": d["order_id"],
                            "amount": d.get("refundable", d["total"]),
                            "reason": reason,
                        },
                    )
                    for d in found
                ],
            )
        return AIMessage(content=" ".join(_refund_answer(r) for r in results))


def _refund_answer(result: ToolMessage) -> str:
    reason = _rejection(result)
    if reason is not None:
        return f"The refund was declined by the reviewer: {reason}"
    data = _payload(result)
    if data is None:
        return f"The reviewer said: {result.content}"
    if "error" in data:
        return f"The refund could not be issued: {data['error']}."
    return (
        f"Refunded {_money(data['amount']):.2f} {data['currency']} for order {data['order_id']} "
        f"(refund {data['refund_id']}).{_edited_note(data)}"
    )


def _wanted_item(text: str) -> tuple[int, str] | None:
    """``(quantity, catalog item)`` from text like "order 4 toner cartridges for CC-100"."""
    lowered = text.lower()
    best: tuple[int, int, str] | None = None
    for item in {i for s in demo_suppliers().values() for i in s["items"]}:
        match = re.search(rf"\b(\d+)\s+(?:x\s+)?{re.escape(item)}s?\b", lowered)
        if match and (best is None or match.start() < best[0]):
            best = (match.start(), int(match.group(1)), item)
    return None if best is None else (best[1], best[2])


class OfflinePurchaseOrderModel:
    """A scripted buyer: check the budget and find a supplier, propose the order, report it."""

    name = "offline (deterministic, no API key)"

    def invoke(self, messages: list[BaseMessage], tools: list[Tool]) -> AIMessage:
        last = messages[-1]
        text = _request_text(messages)
        if isinstance(last, HumanMessage):
            center = COST_CENTER.search(text)
            wanted = _wanted_item(text)
            if not center or not wanted:
                return AIMessage(
                    content="What should I order, how many, and for which cost center? "
                    "For example: Order 4 toner cartridges for CC-100: the printers are empty."
                )
            return _calls(
                messages,
                [
                    ("check_budget", {"cost_center": center.group()}),
                    ("find_supplier", {"item": wanted[1]}),
                ],
            )
        ai, results = _last_turn(messages)
        if ai is None or not results:
            return AIMessage(content="I have nothing further to do.")
        if results[0].name == "check_budget":
            budget, offer = (_payload(r) or {"error": "no answer"} for r in results[:2])
            for problem in (budget, offer):
                if "error" in problem:
                    return AIMessage(content=f"I cannot place that order: {problem['error']}.")
            quantity, _ = _wanted_item(text) or (1, offer["item"])
            total = quantity * _money(offer["unit_price"])
            if total > _money(budget["remaining"]):
                return AIMessage(
                    content=f"I cannot place that order: it would cost {total:.2f} "
                    f"{offer['currency']} but {budget['cost_center']} has only "
                    f"{_money(budget['remaining']):.2f} left."
                )
            args = {
                "cost_center": budget["cost_center"],
                "supplier_id": offer["supplier_id"],
                "item": offer["item"],
                "quantity": quantity,
                "unit_price": offer["unit_price"],
                "justification": _reason(text),
            }
            return _calls(messages, [("create_purchase_order", args)])
        return AIMessage(content=" ".join(_purchase_order_answer(r) for r in results))


def _purchase_order_answer(result: ToolMessage) -> str:
    reason = _rejection(result)
    if reason is not None:
        return f"The purchase order was declined by the reviewer: {reason}"
    data = _payload(result)
    if data is None:
        return f"The reviewer said: {result.content}"
    if "error" in data:
        return f"The purchase order could not be placed: {data['error']}."
    return (
        f"Ordered {data['quantity']} x {data['item']} from {data['supplier']} for "
        f"{_money(data['total']):.2f} {data['currency']} on {data['cost_center']} "
        f"(purchase order {data['po_id']}).{_edited_note(data)}"
    )
