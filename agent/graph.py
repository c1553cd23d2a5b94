"""The agent graph: model -> approval gate -> tools -> model, compiled over a checkpointer.

The gate is its own node and the tools run in the next one, so the ``interrupt()`` (whose node
re-runs from its first line on resume) never sits in front of a side effect in the same node.
The gate speaks the HumanInTheLoopMiddleware shape, so decisions from any inbox apply unchanged.

What makes the gate airtight:

- The model node validates every proposed call against its tool's schema (a malformed proposal
  fails the run; it never reaches a reviewer) and applies the workflow's policy once, storing
  which calls need a reviewer in the checkpoint. The policy reads the ledger: a call beyond
  what the business still allows is answered with the reason and never runs or reaches a
  reviewer; a call with history (an earlier refund of the order) is reviewed, and told why.
- A rejected call is answered with an error tool result and the tools node skips it; an edited
  call runs with exactly the reviewer's arguments (checked against the schema again, and unable
  to name another tool), and its result tells the model what ran instead.
- A call a reviewer rejected or replaced is remembered: if the model proposes it again in the
  same thread it is answered "not executed" without running and without asking anyone.
"""

from __future__ import annotations

import json
import operator
from typing import Annotated, Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt
from pydantic import ValidationError

from agent.ledger import Ledger
from agent.models import REJECTED_PREFIX, ChatModel, ModelError, calls_of
from agent.policy import Policy
from agent.tools import Tool, ToolContext
from core import exactjson
from core.hitl import ActionRequest, HitlRequest, ReviewConfig
from core.hitl_decisions import Edit, Reject, Respond, validate_decisions
from store.receipts import Receipts

NOT_EXECUTED = "The call was not executed. Do not propose it again unless the user asks for it."
EDIT_NOTE = (
    "A reviewer replaced the arguments you proposed before the call ran; it ran with the "
    "executed arguments. This was intended. Do not propose the original call again."
)
REPEAT_NOTE = (
    "Not executed: a reviewer already declined this exact call in this conversation. "
    "Do not propose it again."
)


class AgentState(MessagesState):
    review: list[str]  # ids of the last turn's calls the policy sends to a reviewer
    refused: dict[str, str]  # call id -> why the policy refused it before any reviewer
    notes: dict[str, str]  # call id -> what the reviewer is told the ledger already holds
    edited: dict[str, dict]  # call id -> the arguments the model proposed, for edited calls
    declined: Annotated[list[dict], operator.add]  # {name, args} a reviewer rejected or replaced


def _fingerprint(name: str, args: Any) -> str:
    return f"{name}:{exactjson.dumps(args, sort_keys=True)}"


def check_proposals(ai: AIMessage, tools: dict[str, Tool]) -> None:
    """Refuse (``ModelError``) a turn whose calls name unknown tools or break their schema."""
    seen: set[str] = set()
    for tc in calls_of(ai):
        if not tc.get("id") or tc["id"] in seen:
            raise ModelError(f"the model's call to {tc['name']} has a missing or repeated id")
        seen.add(tc["id"])
        tool = tools.get(tc["name"])
        if tool is None:
            raise ModelError(f"the model called an unknown tool {tc['name']!r}")
        try:
            tool.args_model.model_validate(tc["args"])
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "arguments"
            raise ModelError(
                f"the model proposed malformed input for {tc['name']}: {where}: {first['msg']}"
            ) from None


def approval_request(
    gated: list[dict], tools: dict[str, Tool], notes: dict[str, str] | None = None
) -> HitlRequest:
    """The HITL request for ``gated`` calls, in the model's order, each told what the ledger
    already holds against it."""
    names = list(dict.fromkeys(tc["name"] for tc in gated))
    notes = notes or {}
    return HitlRequest(
        tuple(
            ActionRequest(
                tc["name"],
                tc["args"],
                f"{tools[tc['name']].description}\n\n"
                f"Arguments: {exactjson.dumps(tc['args'], sort_keys=True)}"
                + (f"\n\nReview needed: {notes[tc['id']]}" if tc["id"] in notes else ""),
            )
            for tc in gated
        ),
        tuple(ReviewConfig(n, ("approve", "edit", "reject")) for n in names),
    )


def _last_ai(messages: list) -> tuple[int, AIMessage]:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], AIMessage):
            return i, messages[i]
    raise ValueError("no model message to act on")


def _answer(tc: dict, content: str, status: str) -> ToolMessage:
    return ToolMessage(content=content, tool_call_id=tc["id"], name=tc["name"], status=status)


def build_graph(
    model: ChatModel,
    tools: tuple[Tool, ...],
    policy: Policy,
    ledger: Ledger,
    receipts: Receipts,
    checkpointer: Any,
) -> CompiledStateGraph[AgentState]:
    """The workflow's graph; ``policy`` decides which calls stop at the gate."""
    by_name = {t.name: t for t in tools}
    schemas = {t.name: t.args_schema for t in tools}

    def call_model(state: AgentState, config: RunnableConfig) -> dict:
        ai = model.invoke(list(state["messages"]), list(tools))
        check_proposals(ai, by_name)
        thread_id = config["configurable"]["thread_id"]
        review: list[str] = []
        refused: dict[str, str] = {}
        notes: dict[str, str] = {}
        for tc in calls_of(ai):
            standing = policy.standing(tc["name"], tc["args"], ledger, thread_id)
            if standing.problem:
                refused[tc["id"]] = standing.problem
                continue
            if standing.note:
                notes[tc["id"]] = standing.note
            if standing.note or policy.needs_review(tc["name"], tc["args"]):
                review.append(tc["id"])
        return {"messages": [ai], "review": review, "refused": refused, "notes": notes}

    def after_model(state: AgentState) -> str:
        last = state["messages"][-1]
        return "gate" if isinstance(last, AIMessage) and last.tool_calls else END

    def gate(state: AgentState) -> Command:
        _, ai = _last_ai(state["messages"])
        declined = {_fingerprint(d["name"], d["args"]) for d in state.get("declined") or []}
        review = set(state.get("review") or [])
        refused = state.get("refused") or {}
        answers: list[ToolMessage] = []
        gated: list[dict] = []
        for tc in calls_of(ai):
            if tc["id"] in refused:
                answers.append(_answer(tc, json.dumps({"error": refused[tc["id"]]}), "error"))
            elif _fingerprint(tc["name"], tc["args"]) in declined:
                answers.append(_answer(tc, REPEAT_NOTE, "error"))
            elif tc["id"] in review:
                gated.append(tc)
        if not gated:
            return Command(goto="tools", update={"messages": answers, "edited": {}})

        request = approval_request(gated, by_name, state.get("notes"))
        decisions = validate_decisions(request, interrupt(request.to_json()), schemas)

        calls = {tc["id"]: tc for tc in calls_of(ai)}
        edited: dict[str, dict] = {}
        newly_declined: list[dict] = []
        for tc, decision in zip(gated, decisions, strict=True):
            match decision:
                case Edit(args=args):
                    calls[tc["id"]] = {**tc, "args": args}  # same id and tool, reviewer's args
                    if args != tc["args"]:
                        edited[tc["id"]] = tc["args"]
                        newly_declined.append({"name": tc["name"], "args": tc["args"]})
                case Reject(message=message):
                    reason = message or "no reason given"
                    text = f"{REJECTED_PREFIX}: {reason}\n{NOT_EXECUTED}"
                    answers.append(_answer(tc, text, "error"))
                    newly_declined.append({"name": tc["name"], "args": tc["args"]})
                case Respond(text=text):
                    answers.append(_answer(tc, text or "", "success"))
        updated = AIMessage(
            content=ai.content,
            tool_calls=list(calls.values()),
            id=ai.id,
            response_metadata=ai.response_metadata,
        )
        return Command(
            goto="tools",
            update={
                "messages": [updated, *answers],
                "edited": edited,
                "declined": newly_declined,
            },
        )

    def run_tools(state: AgentState, config: RunnableConfig) -> dict:
        index, ai = _last_ai(state["messages"])
        answered = {
            m.tool_call_id for m in state["messages"][index + 1 :] if isinstance(m, ToolMessage)
        }
        edited = state.get("edited") or {}
        thread_id = config["configurable"]["thread_id"]
        out = []
        for tc in calls_of(ai):
            if tc["id"] in answered:
                continue  # rejected, answered by the reviewer, or a declined repeat
            ctx = ToolContext(thread_id, tc["id"], ledger, receipts)
            out.append(_execute(by_name.get(tc["name"]), tc, ctx, edited.get(tc["id"])))
        return {"messages": out}

    builder = StateGraph(AgentState)
    builder.add_node("model", call_model)
    builder.add_node("gate", gate, destinations=("tools",))
    builder.add_node("tools", run_tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", after_model, ["gate", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


def _execute(tool: Tool | None, call: dict, ctx: ToolContext, proposed: dict | None) -> ToolMessage:
    def reply(payload: dict) -> ToolMessage:
        if proposed is not None:
            payload = {
                **payload,
                "reviewer_edit": {
                    "note": EDIT_NOTE,
                    "proposed": proposed,
                    "executed": call["args"],
                },
            }
        return ToolMessage(
            content=exactjson.dumps(payload),
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
