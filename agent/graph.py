"""The agent graph: model -> approval gate -> tools -> model, compiled over a checkpointer.

The gate is its own node and the tools run in the next one, so the ``interrupt()`` (whose node
re-runs from its first line on resume) never sits in front of a side effect in the same node.
The gate speaks the HumanInTheLoopMiddleware shape, so decisions from any inbox apply unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt
from pydantic import ValidationError

from agent.models import REJECTED_PREFIX, ChatModel
from agent.tools import Tool, ToolContext
from inbox.hitl import validate_decisions
from store.ledger import Ledger
from store.receipts import Receipts


def gated_calls(ai: AIMessage, tools: dict[str, Tool]) -> list[dict]:
    """The tool calls in ``ai`` that a human must decide on, in the model's order."""
    return [tc for tc in ai.tool_calls if tc["name"] in tools and tools[tc["name"]].needs_approval]


def approval_request(ai: AIMessage, tools: dict[str, Tool]) -> dict | None:
    """The HITL request for the calls in ``ai`` that need a human, or None if none do."""
    gated = gated_calls(ai, tools)
    if not gated:
        return None
    names = list(dict.fromkeys(tc["name"] for tc in gated))
    return {
        "action_requests": [
            {
                "name": tc["name"],
                "args": tc["args"],
                "description": f"{tools[tc['name']].description}\n\n"
                f"Arguments: {json.dumps(tc['args'], sort_keys=True)}",
            }
            for tc in gated
        ],
        "review_configs": [
            {"action_name": n, "allowed_decisions": ["approve", "edit", "reject"]} for n in names
        ],
    }


def _last_ai(messages: list) -> tuple[int, AIMessage]:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], AIMessage):
            return i, messages[i]
    raise ValueError("no model message to act on")


def build_graph(
    model: ChatModel,
    tools: tuple[Tool, ...],
    ledger: Ledger,
    receipts: Receipts,
    checkpointer: Any,
):
    by_name = {t.name: t for t in tools}
    schemas = {t.name: t.args_schema for t in tools}

    def call_model(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"], list(tools))]}

    def after_model(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "gate" if isinstance(last, AIMessage) and last.tool_calls else END

    def gate(state: MessagesState) -> Command:
        _, ai = _last_ai(state["messages"])
        request = approval_request(ai, by_name)
        if request is None:
            return Command(goto="tools")
        resume = interrupt(request)
        validate_decisions(request, resume, schemas)
        gated = gated_calls(ai, by_name)
        calls = {tc["id"]: tc for tc in ai.tool_calls}
        answers: list[ToolMessage] = []
        for tc, decision in zip(gated, resume["decisions"], strict=True):
            kind = decision["type"]
            if kind == "edit":
                calls[tc["id"]] = {**tc, "args": decision["edited_action"]["args"]}
            elif kind in ("reject", "respond"):
                message = decision.get("message") or ""
                answers.append(
                    ToolMessage(
                        content=f"{REJECTED_PREFIX}: {message or 'no reason given'}"
                        if kind == "reject"
                        else message,
                        tool_call_id=tc["id"],
                        name=tc["name"],
                        status="error" if kind == "reject" else "success",
                    )
                )
        updated = AIMessage(content=ai.content, tool_calls=list(calls.values()), id=ai.id)
        return Command(goto="tools", update={"messages": [updated, *answers]})

    def run_tools(state: MessagesState, config) -> dict:
        index, ai = _last_ai(state["messages"])
        answered = {
            m.tool_call_id for m in state["messages"][index + 1 :] if isinstance(m, ToolMessage)
        }
        thread_id = config["configurable"]["thread_id"]
        out = []
        for tc in ai.tool_calls:
            if tc["id"] in answered:
                continue
            out.append(
                _execute(
                    by_name.get(tc["name"]), tc, ToolContext(thread_id, tc["id"], ledger, receipts)
                )
            )
        return {"messages": out}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("gate", gate, destinations=("tools",))
    builder.add_node("tools", run_tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", after_model, ["gate", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


def _execute(tool: Tool | None, call: dict, ctx: ToolContext) -> ToolMessage:
    def reply(payload: dict) -> ToolMessage:
        return ToolMessage(
            content=json.dumps(payload),
            tool_call_id=call["id"],
            name=call["name"],
            status="error" if "error" in payload else "success",
        )

    if tool is None:
        return reply({"error": f"unknown tool {call['name']}"})
    try:
        args = tool.args_model.model_validate(call["args"])
    except ValidationError as exc:
        return reply({"error": f"invalid arguments: {exc.errors()[0]['msg']}"})
    return reply(tool.run(ctx, args))
