"""Agent Inbox's shapes, both ways: a request as its ``HumanInterrupt`` list, and what a LangGraph
client resumes with (Agent Inbox's ``HumanResponse``, or the HITL middleware's decisions) as
the decisions the one path takes.

A ``HumanInterrupt`` is ``{action_request: {action, args}, config: {allow_accept, allow_edit,
allow_respond, allow_ignore}, description}``; a ``HumanResponse`` is ``{type: accept | edit |
response | ignore, args}``. They map onto approve, edit, respond and reject. Nothing here checks
a decision against its request beyond reading it: the decision path validates every decision
whatever its source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import UserError
from core.hitl import ActionRequest, HitlRequest, describe_action

# Agent Inbox's response types, as the decision type each becomes
RESPONSES = {"accept": "approve", "edit": "edit", "response": "respond", "ignore": "reject"}
# keys of a resume value that make it a decision, not a map from interrupt id to one
DECISION_KEYS = frozenset({"decisions", "type", "digest", "args", "value", "message"})


def human_interrupts(request: HitlRequest) -> list[dict[str, Any]]:
    """One ``HumanInterrupt`` per proposed action, in the request's order (the order a resume
    answers them in)."""
    return [_human_interrupt(request, i, a) for i, a in enumerate(request.actions)]


def _human_interrupt(request: HitlRequest, index: int, action: ActionRequest) -> dict[str, Any]:
    if action.question is not None:  # a plain interrupt: answered with text (a "response")
        value = action.question.value
        args = dict(value) if isinstance(value, Mapping) else {"question": value}
        allowed = {"respond"}
        description = action.question.text or describe_action(action)
    else:
        args, allowed = action.args, set(request.allowed(index))
        description = action.description or describe_action(action)
    return {
        "action_request": {"action": action.name, "args": args},
        "config": {
            "allow_accept": "approve" in allowed,
            "allow_edit": "edit" in allowed,
            "allow_respond": "respond" in allowed,
            "allow_ignore": "reject" in allowed,
        },
        "description": description,
    }


def decisions_of(value: Any, request: HitlRequest) -> list[Any]:
    """The decisions, one per action, from a resume value: ``{"decisions": [...]}`` (the HITL
    middleware's, or Agent Inbox's middleware mode with ``args``), a list of ``HumanResponse``
    (Agent Inbox's own), or one ``HumanResponse`` for a request of one action. A ``null`` item
    leaves its action unanswered, as on every other source."""
    actions = request.actions
    if isinstance(value, Mapping) and "decisions" in value:
        items = value["decisions"]
    elif isinstance(value, Mapping) and "type" in value:
        items = [value]
    else:
        items = value
    if not isinstance(items, list):
        raise UserError(
            'resume with {"decisions": [...]} or a list of Agent Inbox responses '
            '([{"type": "accept" | "edit" | "response" | "ignore", "args": ...}])'
        )
    if len(items) > max(len(actions), 1) * 2 + 10:  # the path says how many it expects
        raise UserError(f"too many decisions ({len(items)}) for {len(actions)} action(s)")
    return [
        _decision(item, actions[i] if i < len(actions) else None) for i, item in enumerate(items)
    ]


def _decision(item: Any, action: ActionRequest | None) -> Any:
    """One item as the path's decision; an item that is not an Agent Inbox response passes
    as it came (the path refuses it if it is not a decision either)."""
    if not isinstance(item, Mapping) or "args" not in item:
        return item
    kind, args = item.get("type"), item.get("args")
    kind = RESPONSES.get(kind, kind) if isinstance(kind, str) else kind
    if set(item) - {"type", "args"}:
        raise UserError("an Agent Inbox response carries only type and args")
    if kind == "approve":
        return {"type": "approve"}
    if kind == "edit":
        if not isinstance(args, Mapping) or not isinstance(args.get("args"), Mapping):
            raise UserError('an edit response carries args {"action": ..., "args": {...}}')
        name = args.get("action", action.name if action else None)
        return {"type": "edit", "edited_action": {"name": name, "args": dict(args["args"])}}
    if kind in ("respond", "reject"):
        if args is not None and not isinstance(args, str):
            raise UserError(f"a {item.get('type')} response carries text (or null) as args")
        return {"type": kind, **({"message": args} if args else {})}
    raise UserError("an Agent Inbox response's type is accept, edit, response or ignore")
