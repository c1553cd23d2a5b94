"""What the worker needs from any approval inbox, whichever system reviewers use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass
class Approval:
    """One approval request as the inbox holds it; ``decisions`` is set once answered."""

    id: str
    external_id: str
    title: str
    description: str
    request: dict
    args_schemas: dict
    status: str  # pending | answered
    decisions: list[dict] | None
    decided_by: str | None
    created_at: float
    answered_at: float | None
    conversation: list[dict] | None = None  # the run's messages so far, for the reviewer
    approvers: list[str] | None = None  # distinct approvers, when the inbox keeps a quorum
    ladder: str | None = None  # "reminder" or "escalated", once the sweep got that far

    @property
    def answered(self) -> bool:
        return self.status == "answered"

    def resume_value(self) -> dict[str, Any]:
        """The value LangGraph's ``Command(resume=...)`` gets, in the HITL middleware's shape."""
        return {"decisions": self.decisions or []}


class Inbox(Protocol):
    name: str

    def open(
        self,
        *,
        external_id: str,
        dedupe_key: str,
        title: str,
        description: str,
        request: dict,
        args_schemas: dict,
        conversation: list[dict] | None = None,
    ) -> str:
        """Open (or find, by ``dedupe_key``) an approval request; return the inbox's id.

        ``conversation`` is the run so far (:func:`agent.runner.transcript`), so a reviewer sees
        what led to the proposed actions, not just the actions."""

    def get(self, interrupt_id: str) -> Approval | None: ...

    def get_many(self, interrupt_ids: list[str]) -> dict[str, Approval]: ...
