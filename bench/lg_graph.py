"""The one graph section 15 runs on both servers: the refund demo's offline model proposes a
refund, the graph asks a reviewer with an ``interrupt()`` in LangChain's HITL shape, and
answers once decided. No ledger and no database of its own (the demo workflow's tools write to
the product's store, which ``langgraph dev`` has none of): the servers' own persistence is all
that differs.

This product loads it as ``bench.lg_graph:approval`` (``API_WORKFLOWS``: a factory handed the
store's checkpointer); ``langgraph dev`` as ``graph`` (``bench/langgraph_dev/langgraph.json``),
compiled without a checkpointer, since that server brings its own.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

from agent.graph import approval_request
from agent.models import OfflineRefundModel, calls_of
from agent.tools import REFUND_TOOLS, amount_text, demo_orders
from core.hitl_decisions import validate_decisions

GRAPH_ID = "bench.lg_graph:approval"  # the name each side's client code is given
TOOLS = {t.name: t for t in REFUND_TOOLS}
SCHEMAS = {t.name: t.args_schema for t in REFUND_TOOLS}


class State(MessagesState):
    decided: list[dict]


def _looked_up(order_id: str) -> dict:
    """What the demo's ``lookup_order`` answers for an order nothing was refunded on yet."""
    order = demo_orders().get(order_id)
    if order is None:
        return {"error": f"no order {order_id}"}
    total = amount_text(order["total"])
    return {"order_id": order_id, **order, "total": total, "refunded": "0.00", "refundable": total}


def propose(state: State) -> dict:
    """Two turns of the offline refund model: look the order up, then propose the refund."""
    model = OfflineRefundModel()
    messages = list(state["messages"])
    first = model.invoke(messages, list(REFUND_TOOLS))
    answers = [
        ToolMessage(
            json.dumps(_looked_up(tc["args"]["order_id"]), default=str),
            tool_call_id=tc["id"],
            name=tc["name"],
        )
        for tc in calls_of(first)
        if tc["name"] == "lookup_order"
    ]
    second = model.invoke([*messages, first, *answers], list(REFUND_TOOLS))
    return {"messages": [first, *answers, second]}


def review(state: State) -> dict:
    """The approval gate: one ``interrupt()`` for the proposed refunds, answered with one
    decision each."""
    proposed = [tc for tc in calls_of(state["messages"][-1]) if tc["name"] == "issue_refund"]
    if not proposed:
        return {"decided": []}
    request = approval_request(proposed, TOOLS)
    decisions = validate_decisions(request, interrupt(request.to_json()), SCHEMAS)
    return {"decided": [d.to_json() for d in decisions]}


def finish(state: State) -> dict:
    kinds = [d["type"] for d in state.get("decided") or []]
    said = "Refund approved." if kinds and set(kinds) <= {"approve", "edit"} else "No refund."
    return {"messages": [AIMessage(said)]}


def approval(checkpointer: Any) -> Any:
    builder = StateGraph(State)
    for name, node in (("propose", propose), ("review", review), ("finish", finish)):
        builder.add_node(name, node)
    builder.add_edge(START, "propose")
    builder.add_edge("propose", "review")
    builder.add_edge("review", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)


graph = approval(None)  # for langgraph dev, which brings its own checkpointer
