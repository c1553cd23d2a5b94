"""A LangGraph graph written as LangGraph's documentation writes one, for the ``/lg`` stream's
``custom`` mode: its nodes report progress with ``get_stream_writer()`` and it asks a plain
``interrupt()`` question. Named as ``testkit.lg_graphs:progress`` (``API_WORKFLOWS``)."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langchain_core.messages import AIMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt


class State(MessagesState):
    answers: Annotated[list[str], operator.add]


def prepare(state: State) -> dict:
    writer = get_stream_writer()
    writer({"step": "checked stock"})
    writer({"step": "priced"})
    return {}


def confirm(state: State) -> dict:
    answer = interrupt({"question": "Ship the order?", "order": state["messages"][0].content})
    get_stream_writer()({"answered": answer})
    return {"answers": [f"ship: {answer}"]}


def report(state: State) -> dict:
    return {"messages": [AIMessage("Answers: " + "; ".join(state.get("answers") or []))]}


def progress(checkpointer: Any) -> Any:
    builder = StateGraph(State)
    for name, node in (("prepare", prepare), ("confirm", confirm), ("report", report)):
        builder.add_node(name, node)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "confirm")
    builder.add_edge("confirm", "report")
    builder.add_edge("report", END)
    return builder.compile(checkpointer=checkpointer)
