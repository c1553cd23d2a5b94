"""The approval payload contract: LangChain ``HumanInTheLoopMiddleware``'s request and decisions.

Requests are ``{"action_requests": [{name, args, description}], "review_configs":
[{action_name, allowed_decisions}]}``; answers are ``{"decisions": [...]}``, one per action request,
in order. Everything that crosses the inbox boundary is checked here, before any resume, because a
resume value that makes a node raise stays stored in the checkpoint and is re-delivered forever.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from core.errors import UserError
from core.limits import check_text, check_value

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


def locked_arguments(request: dict, index: int) -> list[str]:
    """Arguments of the action a reviewer may not change (the refund's ``order_id``)."""
    name = request["action_requests"][index]["name"]
    for config in request.get("review_configs", []):
        if config.get("action_name") == name:
            return list(config.get("locked_arguments") or [])
    return []


def lock_arguments(request: dict, locked: dict[str, list[str]]) -> dict:
    """``request`` with each tool's locked arguments named in its review config."""
    for config in request.get("review_configs", []):
        if locked.get(config.get("action_name")):
            config["locked_arguments"] = list(locked[config["action_name"]])
    return request


def request_digest(request: dict) -> str:
    """What a reviewer saw, as a digest: every proposed action and its arguments, in order. A
    decision names it, so a page that went stale cannot approve something else."""
    actions = [[a.get("name"), a.get("args")] for a in request.get("action_requests", [])]
    canonical = json.dumps(actions, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def edited_request(request: dict, decisions: list[dict]) -> dict:
    """The request as it will run: each edited action with the reviewer's arguments (for
    judging the policy again: an edit may raise an amount past the quorum amount)."""
    actions = []
    for action, decision in zip(request["action_requests"], decisions, strict=False):
        if isinstance(decision, dict) and decision.get("type") == "edit":
            action = {**action, "args": (decision.get("edited_action") or {}).get("args")}
        actions.append(action)
    return {**request, "action_requests": actions}


def validate_decisions(request: dict, resume: Any, args_schemas: dict | None = None) -> None:
    """Refuse (``UserError``) anything but exactly one allowed, well-formed, storable decision
    per action; an edit keeps its tool and its locked arguments."""
    if not isinstance(resume, dict) or not isinstance(resume.get("decisions"), list):
        raise UserError('a decision must be {"decisions": [...]}')
    check_value(resume, "the decision")
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
            args = edited.get("args")
            validate_args(args, (args_schemas or {}).get(action["name"]), action["name"])
            for name in locked_arguments(request, i):
                if (args or {}).get(name) != (action.get("args") or {}).get(name):
                    raise UserError(
                        f"decision {i + 1}: {name} of {action['name']} may not be changed by a "
                        "reviewer (reject the action instead)"
                    )
        elif kind in ("reject", "respond"):
            message = decision.get("message", "")
            if not isinstance(message, str):
                raise UserError(f"decision {i + 1}: message must be text")
            check_text(message, f"decision {i + 1}: message")


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
