"""Vigilator's wire format: an approval request as an interrupt body, an interrupt record as an
:class:`~inbox.base.Approval` (decisions mapped as for webhooks)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from core.errors import UserError
from core.hitl import ActionRequest, HitlRequest, ReviewConfig
from inbox.base import Approval
from inbox.events import AnsweredData, answered_decisions, approvers
from inbox.vigilator.client import VigilatorError

TITLE_MIN, TITLE_MAX = 2, 100
DESCRIPTION_MIN, DESCRIPTION_MAX = 2, 2000
MAX_ACTIONS, MAX_MESSAGES = 50, 200


def _fit(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_ROLES = {"user": "human", "assistant": "ai", "tool": "tool"}


def to_messages(conversation: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The run's conversation (``role``/``text`` entries) as Vigilator messages, newest 200."""
    out: list[dict[str, Any]] = []
    for entry in conversation or []:
        kind = _ROLES.get(str(entry.get("role")))
        if kind is None:
            continue
        message: dict[str, Any] = {"type": kind, "content": str(entry.get("text") or "")}
        if entry.get("name"):
            message["name"] = entry["name"]
        if kind == "ai" and entry.get("tool_calls"):
            message["toolCalls"] = [
                {"id": c.get("id"), "name": c.get("name"), "args": c.get("args") or {}}
                for c in entry["tool_calls"]
            ]
        if kind == "tool":
            if entry.get("tool_call_id"):
                message["toolCallId"] = entry["tool_call_id"]
            if entry.get("status") in ("success", "error"):
                message["toolStatus"] = entry["status"]
        out.append(message)
    return out[-MAX_MESSAGES:]


def interrupt_body(
    *,
    external_id: str,
    title: str,
    description: str,
    request: HitlRequest,
    args_schemas: dict[str, Any],
    conversation: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``POST api/interrupts`` body for a HITL request, within Vigilator's limits."""
    typed = request
    actions = typed.actions
    if not 1 <= len(actions) <= MAX_ACTIONS:
        raise UserError(
            f"Vigilator takes 1 to {MAX_ACTIONS} actions per interrupt; "
            f"this pause proposes {len(actions)}"
        )
    title = _fit(title.strip(), TITLE_MAX)
    if len(title) < TITLE_MIN:
        title = _fit(f"Approve {actions[0].name}", TITLE_MAX)
    description = _fit(description.strip(), DESCRIPTION_MAX)
    if len(description) < DESCRIPTION_MIN:
        description = title  # LangChain may give no description; Vigilator wants one
    items = []
    for i, action in enumerate(actions):
        item: dict[str, Any] = {
            "name": action.name,
            "args": action.args,
            "allowedDecisions": typed.allowed(i),
        }
        if action.question is not None:  # a plain interrupt: answered with respond's text
            value = action.question.value
            args = value if isinstance(value, dict) else {"question": value}
            item.update(args=args, allowedDecisions=["respond"])
        if (action.description or "").strip():
            item["description"] = _fit((action.description or "").strip(), DESCRIPTION_MAX)
        if args_schemas.get(action.name):
            item["argsSchema"] = args_schemas[action.name]
        items.append(item)
    body: dict[str, Any] = {
        "title": title,
        "description": description,
        "externalId": external_id,
        "actionRequests": items,
    }
    messages = to_messages(conversation)
    if messages:
        body["messages"] = messages
    return body


def _fingerprint(record: dict[str, Any]) -> str:
    """What identifies one of our creates among the thread's interrupts: title and actions."""
    actions = [(a.get("name"), a.get("args") or {}) for a in record.get("actionRequests") or []]
    return json.dumps([record.get("title"), actions], sort_keys=True)


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def to_approval(record: dict[str, Any]) -> Approval:
    """A Vigilator interrupt record as an :class:`Approval`; decisions mapped as for webhooks."""
    actions = record.get("actionRequests") or []
    configs: dict[str, ReviewConfig] = {}
    for a in actions:
        configs.setdefault(
            a["name"], ReviewConfig(a["name"], tuple(a.get("allowedDecisions") or []))
        )
    request = HitlRequest(
        tuple(ActionRequest(a["name"], a.get("args") or {}, a.get("description")) for a in actions),
        tuple(configs.values()),
    )
    answered = bool(record.get("answered")) and bool(actions)
    answered = answered and all(a.get("decision") for a in actions)
    decisions, by = None, []
    if answered:
        try:
            data = AnsweredData.model_validate(record)
        except ValidationError as exc:
            where = ".".join(str(p) for p in exc.errors()[0]["loc"])
            raise VigilatorError(
                f"Vigilator interrupt {record.get('id')} has an answer we cannot read ({where})"
            ) from None
        decisions, by = answered_decisions(data).to_json(), approvers(data)
    return Approval(
        id=record["id"],
        external_id=record.get("externalId") or "",
        title=record.get("title") or "",
        description=record.get("description") or "",
        request=request,
        args_schemas={a["name"]: a["argsSchema"] for a in actions if a.get("argsSchema")},
        status="answered" if answered else "pending",
        decisions=decisions,
        approvers=by,
        created_at=_epoch(record.get("createdAt")) or 0.0,
        answered_at=_epoch(record.get("answeredAt")),
    )


# -- the inbox ------------------------------------------------------------------------------
