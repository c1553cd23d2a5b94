"""Answers addressed by LangGraph's interrupt id, the long form of a position.

A pause may hold several plain interrupts (parallel branches, a ``Send`` fan-out); LangGraph
resumes them by id (``Command(resume={id: value})``), and the request shows each one's id on
its action (``interrupt.id``). Every source that can name one (the API, ``/lg``, a webhook's
item) turns such answers into decisions by position here, so the one decision path sees one
shape: positions, ``null`` for an action left for later. Positions stay the short form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import UserError
from core.hitl import DECISION_TYPES, HitlRequest

ANSWER_TYPES = frozenset({*DECISION_TYPES, "answer"})


def interrupt_positions(request: HitlRequest) -> dict[str, int]:
    """Each plain interrupt's id -> the position of its action in the request."""
    return {a.question.id: i for i, a in enumerate(request.actions) if a.question is not None}


def names_interrupts(request: HitlRequest, answers: object) -> bool:
    """Whether ``answers`` is a mapping keyed by interrupt ids of this request."""
    if not isinstance(answers, Mapping) or not answers:
        return False
    return set(answers) <= set(interrupt_positions(request))


def by_interrupt(request: HitlRequest, answers: Mapping[str, Any]) -> list[Any]:
    """The decisions by position: each named interrupt's answer at its action's position (a
    value that is not a decision is the interrupt's answer), ``None`` for the others."""
    positions = interrupt_positions(request)
    out: list[Any] = [None] * len(request.actions)
    for key, value in answers.items():
        if key not in positions:
            raise UserError(
                f"no pending interrupt {str(key)[:40]!r} in this request (name the interrupt "
                "ids it shows, or answer by position)"
            )
        decided = isinstance(value, Mapping) and value.get("type") in ANSWER_TYPES
        out[positions[key]] = value if decided else {"type": "answer", "value": value}
    return out
