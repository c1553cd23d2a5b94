"""Vigilator's wire as its API documents it: the limits a create must keep, and the JSON body
of an error. The fake (``testkit.fake_vigilator``) holds a client to them, so a client that
breaks one fails here as it would there."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

DECISIONS = ("approve", "edit", "reject", "respond")
MESSAGE_TYPES = ("human", "ai", "tool")


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def error_body(status: int, code: str, message: str, data: Any = None) -> dict:
    return {
        "defined": data is not None,
        "code": code,
        "status": status,
        "message": message,
        "data": data,
    }


class ValidationFailed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ValidationFailed(message)


def validate_create(body: Any) -> None:
    """Vigilator's documented limits, so a client that breaks them fails here too."""
    check(isinstance(body, dict), "body must be an object")
    title, description = body.get("title"), body.get("description")
    check(isinstance(title, str) and 2 <= len(title) <= 100, "title must be 2-100 characters")
    check(
        isinstance(description, str) and 2 <= len(description) <= 2000,
        "description must be 2-2000 characters",
    )
    if "externalId" in body:
        check(isinstance(body["externalId"], str) and body["externalId"], "externalId: text")
    actions = body.get("actionRequests")
    check(isinstance(actions, list) and 1 <= len(actions) <= 50, "actionRequests: 1-50 items")
    for a in actions:
        check(isinstance(a, dict), "actionRequests: objects")
        check(isinstance(a.get("name"), str) and 1 <= len(a["name"]) <= 100, "name: 1-100")
        if "description" in a:
            d = a["description"]
            check(isinstance(d, str) and 1 <= len(d) <= 2000, "action description: 1-2000")
        allowed = a.get("allowedDecisions")
        check(
            isinstance(allowed, list) and allowed and set(allowed) <= set(DECISIONS),
            "allowedDecisions: at least one of approve, edit, reject, respond",
        )
        check(isinstance(a.get("args", {}), dict), "args: object")
        check(isinstance(a.get("argsSchema", {}), dict), "argsSchema: object")
    messages = body.get("messages", [])
    check(isinstance(messages, list) and len(messages) <= 200, "messages: at most 200")
    for m in messages:
        check(isinstance(m, dict) and m.get("type") in MESSAGE_TYPES, "message type")
        check(isinstance(m.get("content"), str), "message content: text")
