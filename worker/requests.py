"""LangGraph interrupts to HITL approval requests and back: what a reviewer sees, and the exact
``Command(resume=...)`` their decisions become.

Handles both of ``HumanInTheLoopMiddleware``'s modes (one batched interrupt, or one ``per_call``
interrupt per gated call, matched back by ``tool_call_id``) and our own gate's requests.
LangGraph and LangChain are imported inside the functions, so a process that only claims
(a webhook answering a duplicate, say) never pays for importing them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.errors import UserError
from core.hitl import DECISION_TYPES, ActionRequest, HitlRequest, ReviewConfig
from core.hitl_decisions import Answer, Decisions, Verdict, parse_stored
from core.questions import Question, storable
from core.schemas import validate

if TYPE_CHECKING:
    from langgraph.types import Command, Interrupt

TITLE_MAX, DESCRIPTION_MAX = 100, 2000


def final_answer(values: dict[str, Any]) -> str:
    from langchain_core.messages import AIMessage

    for message in reversed(values.get("messages", [])):
        if isinstance(message, AIMessage):
            return _text(message.content)
    return ""


def is_per_call(item: Interrupt) -> bool:
    """``HumanInTheLoopMiddleware(interrupt_mode="per_call")``: one interrupt per gated call."""
    return isinstance(item.value, dict) and item.value.get("type") == "tool_approval"


def allowed_from_schema(schema: Any) -> list[str]:
    """The decision types a per-call interrupt's ``response_schema`` accepts (all if unknown)."""
    if not isinstance(schema, dict):
        return list(DECISION_TYPES)
    defs = schema.get("$defs", {})

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref", "")
        return defs.get(ref.rsplit("/", 1)[-1], {}) if ref.startswith("#/$defs/") else node

    kinds = []
    for branch in schema.get("oneOf") or schema.get("anyOf") or [schema]:
        kind = resolve(branch).get("properties", {}).get("type", {}).get("const")
        if kind in DECISION_TYPES:
            kinds.append(kind)
    return kinds or list(DECISION_TYPES)


def _call_order(messages: list[Any]) -> dict[str, int]:
    from langchain_core.messages import AIMessage

    order: dict[str, int] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            for tc in message.tool_calls:
                order.setdefault(str(tc["id"]), len(order))
    return order


def is_batched(item: Interrupt) -> bool:
    """The middleware's default mode (and our gate): ``{"action_requests": [...], ...}``."""
    return isinstance(item.value, dict) and isinstance(item.value.get("action_requests"), list)


def is_question(item: Interrupt) -> bool:
    """Any other value: a plain ``interrupt(value)`` asking a person something."""
    return not is_batched(item) and not is_per_call(item)


Origins = dict[str, tuple[str, tuple[str, ...]]]


def origins(state: Any) -> Origins:
    """Interrupt id -> (node, namespace) from a state read with ``subgraphs=True``: the node
    that called ``interrupt()`` and the path of graph nodes down to it."""
    found: Origins = {}

    def walk(snapshot: Any, path: tuple[str, ...]) -> None:
        for task in getattr(snapshot, "tasks", ()):
            here = (*path, task.name)
            for item in task.interrupts:
                if len(found.get(item.id, ("", ()))[1]) < len(here):
                    found[item.id] = (task.name, here)
            if hasattr(task.state, "tasks"):  # a subgraph's state: its nodes are deeper
                walk(task.state, here)

    walk(state, ())
    return found


def _split(
    interrupts: tuple[Interrupt, ...],
) -> tuple[list[Interrupt], list[Interrupt], list[Interrupt]]:
    batched = sorted((i for i in interrupts if is_batched(i)), key=lambda i: i.id)
    per_call = [i for i in interrupts if is_per_call(i)]
    return batched, per_call, [i for i in interrupts if is_question(i)]


def question_action(item: Interrupt, where: Origins) -> ActionRequest:
    """A plain interrupt as an action request whose only decision is its answer; a value that
    cannot be stored as JSON is refused naming the node."""
    node, path = where.get(item.id, ("", ()))
    question = Question(item.id, storable(item.value, node), node, path)
    return ActionRequest(node or "interrupt", {}, question.text or None, None, question)


def combined(
    interrupts: tuple[Interrupt, ...],
    messages: list[Any] | None = None,
    where: Origins | None = None,
) -> HitlRequest:
    """One HITL request for every interrupt pending on the thread.

    Batched interrupts (ours, or the middleware's default mode) contribute their action requests
    in interrupt-id order; per-call interrupts follow, one action each in the order the model
    made the calls, carrying ``tool_call_id`` so the decision finds its interrupt again; plain
    interrupts come last, one question each, in the order the graph raised them.
    """
    batched, per_call, questions = _split(interrupts)
    order = _call_order(messages or [])
    per_call.sort(key=lambda i: (order.get(i.value["tool_call_id"], len(order)), i.id))
    actions: list[ActionRequest] = []
    configs: dict[str, ReviewConfig] = {}
    for item in batched:
        request = HitlRequest.parse(item.value)
        actions.extend(request.actions)
        for config in request.configs:
            configs.setdefault(config.action_name, config)
    for item in per_call:
        value = item.value
        action = ActionRequest(
            value["name"], value["args"], value.get("description", ""), value["tool_call_id"]
        )
        actions.append(action)
        allowed = tuple(allowed_from_schema(item.response_schema))
        configs.setdefault(action.name, ReviewConfig(action.name, allowed))
    actions.extend(question_action(item, where or {}) for item in questions)
    return HitlRequest(tuple(actions), tuple(configs.values()))


def resume_command(
    interrupts: tuple[Interrupt, ...],
    decision: Decisions | dict[str, Any],
    request: HitlRequest | None = None,
) -> Command[Any]:
    """The resume for the pending interrupts, from decisions in :func:`combined` order.

    One batched interrupt gets the plain ``{"decisions": [...]}``; otherwise an id map: each
    batched interrupt its slice, each per-call interrupt the single decision whose action has
    its ``tool_call_id`` (checked against the interrupt's ``response_schema`` first, since
    LangGraph would raise mid-resume after sibling tools may already have run), each question
    its answer's value. A ``null`` decision (a workflow resuming as each is answered) leaves its
    interrupt out of the map: LangGraph re-runs that node up to its ``interrupt()``.
    """
    from langgraph.types import Command

    raw = decision.to_json() if isinstance(decision, Decisions) else decision["decisions"]
    items = [None if d is None else parse_stored(d) for d in raw]
    batched, per_call, questions = _split(interrupts)
    if len(interrupts) == 1 and batched and all(items):
        return Command(resume=Decisions(tuple(i for i in items if i)).resume_value())
    actions = request.actions if request is not None else ()
    by_call = {a.tool_call_id: i for i, a in enumerate(actions) if a.tool_call_id is not None}
    by_question = {a.question.id: i for i, a in enumerate(actions) if a.question is not None}
    by_id: dict[str, Any] = {}
    start = 0
    for item in batched:
        count = len(HitlRequest.parse(item.value).actions)
        part = items[start : start + count]
        if all(part):
            by_id[item.id] = Decisions(tuple(d for d in part if d)).resume_value()
        start += count
    for item in per_call:
        index = by_call.get(item.value["tool_call_id"])
        if index is None:
            raise UserError(f"no decision for the call {item.value['tool_call_id']}")
        chosen = items[index]
        if chosen is not None:
            _check_schema(chosen, item.response_schema, item.value["name"])
            by_id[item.id] = chosen.to_json()
    for item in questions:
        index = by_question.get(item.id)
        if index is None:
            raise UserError(f"no answer for the interrupt {item.id}")
        answer = items[index]
        if isinstance(answer, Answer):
            by_id[item.id] = answer.value
    if not by_id:
        raise UserError("no pending interrupt is answered yet")
    return Command(resume=by_id)


def _check_schema(decision: Verdict, schema: Any, name: str) -> None:
    if not isinstance(schema, dict):
        return
    import jsonschema

    try:
        validate(decision.to_json(), schema)
    except jsonschema.ValidationError as exc:
        raise UserError(f"decision for {name} does not fit its interrupt: {exc.message}") from None


def transcript(
    messages: list[Any], limit: int = 50, text_limit: int = 2000
) -> list[dict[str, Any]]:
    """The conversation so far as plain JSON for reviewers: who said what, which tools ran."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[dict[str, Any]] = []
    for m in messages[-limit:]:
        text = _truncate(_text(m.content), text_limit)
        if isinstance(m, HumanMessage):
            out.append({"role": "user", "text": text})
        elif isinstance(m, AIMessage):
            entry: dict[str, Any] = {"role": "assistant", "text": text}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {"id": tc["id"], "name": tc["name"], "args": tc["args"]} for tc in m.tool_calls
                ]
            out.append(entry)
        elif isinstance(m, ToolMessage):
            out.append(
                {
                    "role": "tool",
                    "name": m.name,
                    "tool_call_id": m.tool_call_id,
                    "status": m.status,
                    "text": text,
                }
            )
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str | dict)
    )


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def request_text(messages: list[Any]) -> str:
    """What the user asked, from the first human message."""
    from langchain_core.messages import HumanMessage

    return next((_text(m.content) for m in messages if isinstance(m, HumanMessage)), "")


def title_and_description(request: HitlRequest, messages: list[Any]) -> tuple[str, str]:
    """The approval's title and description, within the lengths every inbox accepts."""
    typed = request
    asked = request_text(messages)
    parts = [f"Request: {asked}"] if asked else []
    parts += [a.description or "" for a in typed.actions]
    verb = "Answer" if all(a.question for a in typed.actions) else "Approve"
    title = _truncate(f"{verb} {typed.summary()}", TITLE_MAX)
    return title, _truncate("\n\n".join(parts), DESCRIPTION_MAX)
