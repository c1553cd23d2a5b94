"""The approval payload contract: LangChain ``HumanInTheLoopMiddleware``'s request and decisions.

Requests are ``{"action_requests": [{name, args, description}], "review_configs":
[{action_name, allowed_decisions}]}``; answers are ``{"decisions": [...]}``, one per action request,
in order. Everything that crosses the inbox boundary is checked here, before any resume, because a
resume value that makes a node raise stays stored in the checkpoint and is re-delivered forever.
"""

from __future__ import annotations

import json
from typing import Any

from core.errors import UserError

DECISION_TYPES = ("approve", "edit", "reject", "respond")


def allowed_decisions(request: dict, index: int) -> list[str]:
    name = request["action_requests"][index]["name"]
    for config in request.get("review_configs", []):
        if config.get("action_name") == name:
            return list(config.get("allowed_decisions", DECISION_TYPES))
    return list(DECISION_TYPES)


def validate_args(args: Any, schema: dict | None, name: str) -> None:
    """Edited arguments must satisfy the tool's JSON schema (when the request carries one)."""
    if not isinstance(args, dict):
        raise UserError(f"edited arguments for {name} must be a JSON object")
    if not schema:
        return
    import jsonschema

    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "arguments"
        raise UserError(f"invalid arguments for {name}: {where}: {exc.message}") from None


def validate_decisions(request: dict, resume: Any, args_schemas: dict | None = None) -> None:
    """Refuse (``UserError``) anything but exactly one allowed, well-formed decision per action."""
    if not isinstance(resume, dict) or not isinstance(resume.get("decisions"), list):
        raise UserError('a decision must be {"decisions": [...]}')
    actions = request["action_requests"]
    decisions = resume["decisions"]
    if len(decisions) != len(actions):
        raise UserError(
            f"expected {len(actions)} decision(s), one per proposed action, got {len(decisions)}"
        )
    for i, (action, decision) in enumerate(zip(actions, decisions, strict=True)):
        kind = decision.get("type") if isinstance(decision, dict) else None
        if kind not in DECISION_TYPES:
            raise UserError(f"decision {i + 1}: type must be one of {', '.join(DECISION_TYPES)}")
        if kind not in allowed_decisions(request, i):
            raise UserError(f"decision {i + 1}: {kind} is not allowed for {action['name']}")
        if kind == "edit":
            edited = decision.get("edited_action")
            if not isinstance(edited, dict) or edited.get("name") != action["name"]:
                raise UserError(
                    f"decision {i + 1}: an edit must keep the tool {action['name']} "
                    '({"edited_action": {"name": ..., "args": {...}}})'
                )
            validate_args(
                edited.get("args"), (args_schemas or {}).get(action["name"]), action["name"]
            )
        elif kind in ("reject", "respond") and not isinstance(decision.get("message", ""), str):
            raise UserError(f"decision {i + 1}: message must be text")


def describe_action(action: dict) -> str:
    """``issue_refund(order_id='A-1001', amount=49.9)`` for one-line listings."""
    args = ", ".join(f"{k}={json.dumps(v)}" for k, v in action.get("args", {}).items())
    return f"{action['name']}({args})"


def summary(request: dict) -> str:
    return "; ".join(describe_action(a) for a in request["action_requests"])


def conversation_lines(conversation: list[dict], width: int = 160) -> list[str]:
    """The stored conversation, one short line per message, for ``python -m inbox show``."""
    lines = []
    for entry in conversation:
        role = entry.get("role", "?")
        text = " ".join(str(entry.get("text") or "").split())
        if role == "assistant" and entry.get("tool_calls"):
            calls = "; ".join(describe_action(c) for c in entry["tool_calls"])
            text = f"{text} -> {calls}" if text else f"-> {calls}"
        elif role == "tool":
            role = f"tool {entry.get('name')} ({entry.get('status')})"
        line = f"{role}: {text}"
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    return lines
