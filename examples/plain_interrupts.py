"""Plain ``interrupt()`` graphs, written as LangGraph's documentation writes them, run by the
worker unchanged: name a factory as ``--workflow examples.plain_interrupts:<factory>``::

    uv run run.py --workflow examples.plain_interrupts:ship_order "Order 1042, 3 chairs"
    uv run python -m inbox show <id>
    uv run python -m inbox answer <id> --value "yes, by Friday"
    uv run recover.py

Each factory takes the checkpointer and compiles its graph over it. The runs start from the
text given (``{"messages": [HumanMessage(text)]}``) and end with an ``AIMessage`` saying what the
answers were, which is the run's result. See docs/any-interrupt.md.
"""

from __future__ import annotations

import operator
from datetime import date
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Send, interrupt

from worker.effects import once


class State(MessagesState):
    answers: Annotated[list[str], operator.add]
    asked: int
    item: str


def _asked(state: State) -> str:
    return next((str(m.content) for m in state["messages"] if isinstance(m, HumanMessage)), "")


def _report(state: State) -> dict:
    return {"messages": [AIMessage("Answers: " + "; ".join(state.get("answers") or []))]}


def _linear(checkpointer: Any, *nodes: tuple[str, Any]) -> Any:
    builder = StateGraph(State)
    previous = START
    for name, node in nodes:
        builder.add_node(name, node)
        builder.add_edge(previous, name)
        previous = name
    builder.add_node("report", _report)
    builder.add_edge(previous, "report")
    builder.add_edge("report", END)
    return builder.compile(checkpointer=checkpointer)


# -- one question --------------------------------------------------------------------------


def confirm(state: State) -> dict:
    """A dict value: shown as labelled fields, answered with free text."""
    answer = interrupt({"question": "Ship the order?", "order": _asked(state)})
    return {"answers": [f"ship: {answer}"]}


def ship_order(checkpointer: Any) -> Any:
    return _linear(checkpointer, ("confirm", confirm))


def discount(state: State) -> dict:
    """A string value: shown as text; here answered with JSON."""
    answer = interrupt('Which discount applies? Answer as JSON, e.g. {"percent": 10}')
    return {"answers": [f"discount: {answer!r}"]}


def string_question(checkpointer: Any) -> Any:
    return _linear(checkpointer, ("discount", discount))


def quantity(state: State) -> dict:
    """A value that declares its answer: ``answer_schema`` is checked before the run resumes."""
    answer = interrupt(
        {
            "question": "How many units should we reorder?",
            "answer_schema": {"type": "integer", "minimum": 1, "maximum": 500},
        }
    )
    return {"answers": [f"units: {answer}"]}


def approve_reorder(state: State) -> dict:
    """A yes/no question: ``answer_schema`` ``{"type": "boolean"}``."""
    answer = interrupt({"question": "Reorder now?", "answer_schema": {"type": "boolean"}})
    return {"answers": [f"now: {answer}"]}


def schema_question(checkpointer: Any) -> Any:
    return _linear(checkpointer, ("quantity", quantity), ("approve_reorder", approve_reorder))


# -- several pending at once ---------------------------------------------------------------


def legal(state: State) -> dict:
    answer = interrupt("Legal: may we use the customer's logo?")
    return {"answers": [f"legal: {answer}"]}


def finance(state: State) -> dict:
    answer = interrupt({"question": "Finance: approve the budget?", "amount": 1200})
    return {"answers": [f"finance: {answer}"]}


def _parallel(checkpointer: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("legal", legal)
    builder.add_node("finance", finance)
    builder.add_node("report", _report)
    builder.add_edge(START, "legal")
    builder.add_edge(START, "finance")
    builder.add_edge(["legal", "finance"], "report")
    builder.add_edge("report", END)
    return builder.compile(checkpointer=checkpointer)


def parallel_review(checkpointer: Any) -> Any:
    """Two branches, each pausing: the run resumes when both are answered."""
    return _parallel(checkpointer)


def parallel_each(checkpointer: Any) -> Any:
    """The same branches; the run resumes as each is answered (``resume_each``)."""
    return _parallel(checkpointer)


parallel_each.resume_each = True  # type: ignore[attr-defined]


def check_item(state: State) -> dict:
    answer = interrupt(f"Is {state['item']} in stock?")
    return {"answers": [f"{state['item']}: {answer}"]}


def fan_out(checkpointer: Any) -> Any:
    """A ``Send`` fan-out: one question per item of the request (``a, b, c``)."""
    builder = StateGraph(State)
    builder.add_node("check_item", check_item)
    builder.add_node("report", _report)
    builder.add_conditional_edges(
        START,
        lambda s: [Send("check_item", {"item": x.strip()}) for x in _asked(s).split(",")],
        ["check_item"],
    )
    builder.add_edge("check_item", "report")
    builder.add_edge("report", END)
    return builder.compile(checkpointer=checkpointer)


def subgraph_review(checkpointer: Any) -> Any:
    """The question is asked inside a subgraph used as a node."""
    inner = StateGraph(State)
    inner.add_node("sign_off", legal)
    inner.add_edge(START, "sign_off")
    return _linear(checkpointer, ("review", inner.compile()))


# -- sequential ----------------------------------------------------------------------------


def ask_next(state: State) -> dict:
    number = (state.get("asked") or 0) + 1
    answer = interrupt(f"Question {number} of 3: any remark?")
    return {"answers": [f"{number}: {answer}"], "asked": number}


def three_questions(checkpointer: Any) -> Any:
    """An interrupt in a loop: each pause is its own request."""
    builder = StateGraph(State)
    builder.add_node("ask_next", ask_next)
    builder.add_node("report", _report)
    builder.add_edge(START, "ask_next")
    builder.add_conditional_edges(
        "ask_next", lambda s: "report" if s["asked"] >= 3 else "ask_next", ["ask_next", "report"]
    )
    builder.add_edge("report", END)
    return builder.compile(checkpointer=checkpointer)


# -- a side effect before interrupt() ------------------------------------------------------

SENT: list[str] = []  # the "mail server" of this example: what was sent


def notify_then_ask(state: State) -> dict:
    """LangGraph re-runs this node from its first line on resume; ``once`` keeps the e-mail
    to one, whatever the re-runs."""
    sent = once("email", lambda: {"message_id": _send_mail(_asked(state))})
    answer = interrupt({"question": "The customer was told. Close the ticket?", **sent})
    return {"answers": [f"close: {answer}"]}


def _send_mail(text: str) -> str:
    SENT.append(text)
    return f"msg-{len(SENT)}"


def side_effect(checkpointer: Any) -> Any:
    return _linear(checkpointer, ("notify_then_ask", notify_then_ask))


def pick_date(state: State) -> dict:
    answer = interrupt({"question": "Deliver on this day?", "day": date(2025, 1, 31)})
    return {"answers": [str(answer)]}


def bad_value(checkpointer: Any) -> Any:
    """A value that is not JSON (a ``date``): the run fails naming the node."""
    return _linear(checkpointer, ("pick_date", pick_date))


# -- inside a tool of a create_agent agent -------------------------------------------------


@tool
def book_meeting(day: str) -> str:
    """Book a meeting on a day, after asking the organiser which room."""
    room = interrupt({"question": f"Which room for the meeting on {day}?"})
    return f"Booked {room} on {day}"


class ScriptedModel(BaseChatModel):
    """Calls ``book_meeting`` once, then says what the tool answered (runs offline)."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, **kwargs: Any) -> Any:
        done = [m for m in messages if isinstance(m, ToolMessage)]
        if done:
            reply = AIMessage(str(done[-1].content))
        else:
            call = {"id": "call_book_1", "name": "book_meeting", "args": {"day": "Monday"}}
            reply = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def tool_agent(checkpointer: Any) -> Any:
    """``create_agent`` whose tool asks a person with ``interrupt()``."""
    from langchain.agents import create_agent

    return create_agent(ScriptedModel(), [book_meeting], checkpointer=checkpointer)
