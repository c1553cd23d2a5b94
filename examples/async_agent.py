"""An async agent run by the worker: async tools and a chat model that only works with
``ainvoke`` (as many hosted-model clients and MCP tools are).

The worker sees the async tools and drives the graph through ``astream``; a graph whose only
async part is its chat model cannot be seen from outside, so its factory says so with
``build_graph.asynchronous = True`` (or ``register_workflow(..., asynchronous=True)``)::

    uv run run.py --workflow examples.async_agent:build_graph "Credit 15.00 to customer C-42: late"
    uv run python -m inbox approve <id>
    uv run recover.py
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import InjectedToolCallId, tool

from examples.byo_agent import CUSTOMERS, ScriptedChatModel


@tool
async def find_customer(customer_id: str) -> str:
    """Look a customer up by id, e.g. C-42."""
    found = CUSTOMERS.get(customer_id)
    return json.dumps({"customer_id": customer_id, **found} if found else {"error": "not found"})


@tool
async def apply_credit(
    customer_id: str,
    amount: float,
    note: str,
    tool_call_id: Annotated[str, InjectedToolCallId],
) -> str:
    """Credit a customer's account (a reviewer approves it first)."""
    credit_id = "cr_" + hashlib.sha256(tool_call_id.encode()).hexdigest()[:10]
    return f"Credited {amount:.2f} EUR to {customer_id} ({credit_id}): {note}"


class AsyncOnlyChatModel(ScriptedChatModel):
    """The scripted model, callable only through ``ainvoke``: ``invoke`` raises."""

    @property
    def _llm_type(self) -> str:
        return "scripted-async-only"

    def bind_tools(self, tools: Any, **kwargs: Any) -> AsyncOnlyChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs):
        raise NotImplementedError("async only: use ainvoke")

    async def _agenerate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kw):
        return ChatResult(generations=[ChatGeneration(message=self._turn(messages))])


def build_graph(checkpointer: Any) -> Any:
    """The workflow factory: the async tools mark the graph as async."""
    return create_agent(
        AsyncOnlyChatModel(),
        [find_customer, apply_credit],
        middleware=[
            HumanInTheLoopMiddleware(
                interrupt_on={"apply_credit": {"allowed_decisions": ["approve", "edit", "reject"]}}
            )
        ],
        checkpointer=checkpointer,
    )
