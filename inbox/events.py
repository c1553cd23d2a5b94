"""Inbox events on the wire (Vigilator's shape) and their mapping to HITL decisions.

``interrupt.answered`` items carry ``name``, ``decision``, ``editedArgs``, ``responseText`` and
``decidedByName`` but no id or args, so they match the pending request's actions by position.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import UserError
from core.hitl import HitlRequest
from core.hitl_decisions import (
    Answer,
    Approve,
    Decisions,
    Edit,
    Reject,
    Respond,
    Verdict,
    parse_stored,
)
from core.limits import check_name, parse_json
from inbox.addressed import interrupt_positions
from inbox.base import Approval
from inbox.duties import distinct

ANSWERED = "interrupt.answered"


class AnsweredItem(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    name: str
    decision: Literal["approve", "edit", "reject", "respond"]
    edited_args: dict[str, Any] | None = Field(default=None, alias="editedArgs")
    response_text: str | None = Field(default=None, alias="responseText")
    decided_by_name: str | None = Field(default=None, alias="decidedByName")
    # Ours: which action of the request this answers (0-based); every item names one, or none
    # does and the items answer the actions in order. Naming them answers part of a pause.
    position: int | None = Field(default=None, ge=0, le=999)
    # Ours: or the LangGraph interrupt id of the action (a plain interrupt's, as shown)
    interrupt_id: str | None = Field(default=None, alias="interruptId", max_length=64)

    @field_validator("decided_by_name")
    @classmethod
    def _a_name(cls, value: str | None) -> str | None:
        return None if value is None else _name(value)


class AnsweredData(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    id: str = Field(min_length=1)
    external_id: str = Field(alias="externalId", min_length=1)
    action_requests: list[AnsweredItem] = Field(alias="actionRequests", min_length=1)
    # Ours: every approver of a quorum (the wire format names one decider per action)
    approvers: list[str] | None = None
    # Ours: the digest of the request the inbox showed (``approval.digest``), where it knows it
    digest: str | None = Field(default=None, min_length=1, max_length=64)

    @field_validator("approvers")
    @classmethod
    def _names(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [_name(v) for v in value]


def _name(value: str) -> str:
    try:
        return check_name(value, "a decider's name")
    except UserError as exc:
        raise ValueError(str(exc)) from None


class Envelope(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str = Field(min_length=1)
    data: dict[str, Any] = Field(default_factory=dict)


class InvalidEvent(ValueError):
    """A verified body that is not an event we understand (answered with 422)."""


@dataclass
class Event:
    type: str
    data: dict[str, Any]
    answered: AnsweredData | None = None

    @property
    def external_id(self) -> str | None:
        value = self.data.get("externalId")
        return value if isinstance(value, str) else None


def parse_event(body: bytes) -> Event:
    try:
        envelope = Envelope.model_validate(parse_json(body))
    except (UserError, ValueError, ValidationError) as exc:
        raise InvalidEvent(f"not a valid event: {_first_error(exc)}") from None
    answered = None
    if envelope.type == ANSWERED:
        try:
            answered = AnsweredData.model_validate(envelope.data)
        except ValidationError as exc:
            raise InvalidEvent(f"not a valid {ANSWERED} event: {_first_error(exc)}") from None
    return Event(envelope.type, envelope.data, answered)


def _first_error(exc: Exception) -> str:
    if isinstance(exc, UserError):
        return str(exc)
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        return f"{where}: {err['msg']}"
    return "body is not JSON"


def answered_decisions(data: AnsweredData) -> Decisions:
    """The decisions an answered event carries, one per action in order."""
    decisions: list[Verdict] = []
    for item in data.action_requests:
        if item.decision == "edit":
            decisions.append(Edit(item.edited_args, item.name))
        elif item.decision == "approve":
            decisions.append(Approve())
        elif item.decision == "reject":
            decisions.append(Reject(item.response_text or ""))
        else:
            decisions.append(Respond(item.response_text or ""))
    return Decisions(tuple(decisions))


def answered_by_position(data: AnsweredData, request: HitlRequest) -> list[dict[str, Any] | None]:
    """The decisions, one per action of ``request``: in order, or where the items name their
    positions (or interrupt ids), at those, the others left unanswered for a later answer."""
    decisions: list[dict[str, Any] | None] = list(answered_decisions(data).to_json())
    ids = interrupt_positions(request)
    positions = [
        ids.get(i.interrupt_id, -1) if i.interrupt_id is not None else i.position
        for i in data.action_requests
    ]
    if all(p is None for p in positions):
        return decisions
    named = [p for p in positions if p is not None]
    if len(named) != len(positions) or len(set(named)) != len(named):
        raise UserError(
            "every answered action names its position or interrupt id, once, or none does"
        )
    if -1 in named:
        raise UserError("an answered action names an interrupt id this request does not hold")
    out: list[dict[str, Any] | None] = [None] * max(len(request.actions), max(named) + 1)
    for position, decision in zip(named, decisions, strict=True):
        out[position] = decision
    return out


def approvers(data: AnsweredData) -> list[str]:
    """Everyone the event names as a decider, each once (several people may answer the actions
    of one request)."""
    named = data.approvers or []
    return distinct([*named, *(i.decided_by_name for i in data.action_requests)])


def answered_event(approval: Approval) -> dict[str, Any]:
    """The ``interrupt.answered`` event for an answered request, in the same wire shape."""
    request = approval.request
    items = []
    pairs = zip(request.actions, approval.decisions or [], strict=True)
    for position, (action, raw) in enumerate(pairs):
        if raw is None:
            continue  # left for a later pause (a workflow resuming as each is answered)
        decision = parse_stored(raw)
        item: dict[str, Any] = {
            "position": position,
            "name": action.name,
            "decision": "respond" if isinstance(decision, Answer) else decision.kind,
            "decidedByName": approval.approvers[-1] if approval.approvers else None,
        }
        match decision:
            case Edit(args=args):
                item["editedArgs"] = args
            case Reject(message=text) | Respond(text=text):
                item["responseText"] = text or ""
            case Answer(value=value):  # Vigilator's free answer is a respond's text
                item["responseText"] = value if isinstance(value, str) else json.dumps(value)
        items.append(item)
    return {
        "type": ANSWERED,
        "data": {
            "id": approval.id,
            "externalId": approval.external_id,
            "status": "answered",
            "title": approval.title,
            "actionRequests": items,
            "approvers": approval.approvers,
            **({"digest": approval.digest} if approval.digest else {}),
        },
    }
