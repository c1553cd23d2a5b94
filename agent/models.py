"""Model adapters behind one interface: given the conversation and tools, return an AIMessage.

The offline model is deterministic and needs no key, so the demo and the tests run anywhere.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Protocol

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agent.tools import Tool

ORDER_ID = re.compile(r"\b[A-Z]-\d{4}\b")
REJECTED_PREFIX = "Rejected by the reviewer"


class ChatModel(Protocol):
    name: str

    def invoke(self, messages: list[BaseMessage], tools: list[Tool]) -> AIMessage: ...


def _call(messages: list[BaseMessage], name: str, args: dict) -> AIMessage:
    # Ids derived from the conversation: the same history always proposes the same call.
    digest = hashlib.sha256(f"{len(messages)}:{name}:{json.dumps(args, sort_keys=True)}".encode())
    call_id = "toolu_" + digest.hexdigest()[:24]
    return AIMessage(content="", tool_calls=[{"id": call_id, "name": name, "args": args}])


class OfflineRefundModel:
    """A scripted refund agent: look the order up, propose the refund, report the outcome."""

    name = "offline (deterministic, no API key)"

    def invoke(self, messages: list[BaseMessage], tools: list[Tool]) -> AIMessage:
        last = messages[-1]
        request = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        if isinstance(last, HumanMessage):
            match = ORDER_ID.search(str(last.content))
            if not match:
                return AIMessage(
                    content="Which order is this about? Please give its number, e.g. A-1001."
                )
            return _call(messages, "lookup_order", {"order_id": match.group()})
        if not isinstance(last, ToolMessage):
            return AIMessage(content="I have nothing further to do.")
        if last.name == "lookup_order":
            order = json.loads(str(last.content))
            if "error" in order:
                return AIMessage(content=f"I could not find that order: {order['error']}.")
            text = str(request.content)
            reason = text.split(":", 1)[1].strip() if ":" in text else text.strip()
            args = {"order_id": order["order_id"], "amount": order["total"], "reason": reason}
            return _call(messages, "issue_refund", args)
        return AIMessage(content=_refund_answer(last))


def _refund_answer(result: ToolMessage) -> str:
    text = str(result.content)
    if result.status == "error" and text.startswith(REJECTED_PREFIX):
        reason = text.partition(":")[2].strip() or "no reason given"
        return f"The refund was declined by the reviewer: {reason}"
    try:
        data = json.loads(text)
    except ValueError:
        return f"The reviewer said: {text}"
    if "error" in data:
        return f"The refund could not be issued: {data['error']}."
    return (
        f"Refunded {data['amount']:.2f} {data['currency']} for order {data['order_id']} "
        f"(refund {data['refund_id']})."
    )
