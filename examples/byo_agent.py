"""Bring your own graph: a plain ``langchain.agents.create_agent`` agent, run by the worker.

The graph below is built exactly as LangChain documents it, with ``HumanInTheLoopMiddleware``
guarding ``apply_credit``. The worker needs nothing from it but a factory that compiles it over
the checkpointer it is handed; name the factory as ``examples.byo_agent:build_graph`` and every
process (``run.py``, ``recover.py``, the webhook) can import it from the name stored on the run::

    uv run run.py --workflow examples.byo_agent:build_graph "Credit 15.00 to customer C-42: late"
    uv run python -m inbox approve <id>
    uv run recover.py

or ``uv run python -m examples.byo_agent "..."`` for the first step. ``build_graph_per_call``
is the same agent with ``interrupt_mode="per_call"`` (one interrupt per gated call).

The chat model is scripted so the example runs offline; put any tool-calling chat model in its
place (e.g. ``ChatAnthropic`` from ``langchain-anthropic``) and nothing else changes.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import InjectedToolCallId, tool

CUSTOMERS = {
    "C-42": {"name": "Ada Lovelace", "plan": "pro"},
    "C-7": {"name": "Grace Hopper", "plan": "basic"},
}
CREDIT = re.compile(r"(\d+(?:\.\d+)?)\s+(?:EUR\s+)?to\s+(?:customer\s+)?(C-\d+)", re.I)


@tool
def find_customer(customer_id: str) -> str:
    """Look a customer up by id, e.g. C-42."""
    found = CUSTOMERS.get(customer_id)
    return json.dumps({"customer_id": customer_id, **found} if found else {"error": "not found"})


@tool
def apply_credit(
    customer_id: str,
    amount: float,
    note: str,
    tool_call_id: Annotated[str, InjectedToolCallId],
) -> str:
    """Credit a customer's account (a reviewer approves it first)."""
    # A real write would pass the tool-call id to the billing system as its idempotency key: a
    # resumed or retried run then finds the first credit instead of making a second one.
    credit_id = "cr_" + hashlib.sha256(tool_call_id.encode()).hexdigest()[:10]
    return f"Credited {amount:.2f} EUR to {customer_id} ({credit_id}): {note}"


class ScriptedChatModel(BaseChatModel):
    """A deterministic stand-in for a real chat model: the same conversation, the same turn."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs):
        return ChatResult(generations=[ChatGeneration(message=self._turn(messages))])

    def _turn(self, messages: list[BaseMessage]) -> AIMessage:
        asked = next(str(m.content) for m in messages if isinstance(m, HumanMessage))
        credits = CREDIT.findall(asked)
        note = asked.split(":", 1)[1].strip() if ":" in asked else "goodwill credit"
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if not credits:
            return AIMessage("Whom should I credit, and how much? e.g. 15.00 to customer C-42")
        if not results:
            return self._calls(
                messages, [("find_customer", {"customer_id": c}) for _, c in credits]
            )
        if all(m.name == "find_customer" for m in results):
            calls = [
                ("apply_credit", {"customer_id": c, "amount": float(a), "note": note})
                for a, c in credits
            ]
            return self._calls(messages, calls)
        # The last line of each result: an edited call's result starts with the middleware's
        # notice, and ends with what the tool said.
        done = [str(m.content).splitlines()[-1] for m in results if m.name == "apply_credit"]
        return AIMessage(" ".join(done))

    @staticmethod
    def _calls(messages: list[BaseMessage], calls: list[tuple[str, dict]]) -> AIMessage:
        tool_calls = []
        for i, (name, args) in enumerate(calls):
            key = f"{len(messages)}:{i}:{name}:{json.dumps(args, sort_keys=True)}"
            tool_calls.append(
                {
                    "id": "call_" + hashlib.sha256(key.encode()).hexdigest()[:16],
                    "name": name,
                    "args": args,
                }
            )
        return AIMessage("", tool_calls=tool_calls)


def _agent(checkpointer: Any, mode: str) -> Any:
    return create_agent(
        ScriptedChatModel(),
        [find_customer, apply_credit],
        middleware=[
            HumanInTheLoopMiddleware(
                interrupt_on={"apply_credit": {"allowed_decisions": ["approve", "edit", "reject"]}},
                interrupt_mode=mode,
            )
        ],
        checkpointer=checkpointer,
    )


def build_graph(checkpointer: Any) -> Any:
    """The workflow factory: one interrupt per model turn (the middleware's default)."""
    return _agent(checkpointer, "batched")


def build_graph_per_call(checkpointer: Any) -> Any:
    """The same agent with one interrupt per gated tool call."""
    return _agent(checkpointer, "per_call")


def main() -> None:
    from core.cli import cli_main
    from worker.runner import run_thread

    @cli_main
    def start() -> None:
        text = " ".join(sys.argv[1:]) or "Credit 15.00 to customer C-42: the delivery was late"
        print(run_thread(None, text, workflow="examples.byo_agent:build_graph").line())

    start()


if __name__ == "__main__":
    main()
