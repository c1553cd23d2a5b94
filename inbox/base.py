"""What the worker needs from any approval inbox, whichever system reviewers use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from core.hitl import HitlRequest


@dataclass(frozen=True)
class Rules:
    """Who may decide a request and until when, fixed by the worker when the run pauses."""

    requested_by: str | None = None
    separation: bool = False  # the requester may not approve
    quorum: int = 1  # distinct approvers an approval needs
    expires_at: float | None = None  # epoch seconds; no answer is accepted after it


@dataclass
class Approval:
    """One approval request as the inbox holds it; ``decisions`` is set once answered."""

    id: str
    external_id: str
    title: str
    description: str
    request: HitlRequest
    args_schemas: dict[str, Any]
    status: str  # pending | answered | expired | cancelled
    decisions: list[dict[str, Any]] | None
    created_at: float
    answered_at: float | None
    approvers: list[str] = field(default_factory=list)  # who decided, one entry per person
    conversation: list[dict[str, Any]] | None = None  # the run's messages so far, for the reviewer
    ladder: str | None = None  # "reminder" or "escalated", once the sweep got that far
    quorum: int = 1  # distinct approvers an approval needs (fixed at the pause)
    # the digest of the request as this inbox holds it, where it holds it exactly (the local
    # inbox's copy): a decision made on it names what its reviewer read
    digest: str | None = None

    @property
    def answered(self) -> bool:
        return self.status == "answered"

    @property
    def decided_by(self) -> str | None:
        """The approvers for display (each is kept separately in ``approvers``)."""
        return ", ".join(self.approvers) or None


class Inbox(Protocol):
    name: str

    def open(
        self,
        *,
        external_id: str,
        dedupe_key: str,
        title: str,
        description: str,
        request: HitlRequest,
        args_schemas: dict[str, Any],
        conversation: list[dict[str, Any]] | None,
        rules: Rules,
    ) -> str:
        """Open (or find, by ``dedupe_key``) an approval request; return the inbox's id.

        ``conversation`` is the run so far, so a reviewer sees what led to the proposed actions;
        ``rules`` say who may decide and until when."""

    def get(self, interrupt_id: str) -> Approval | None: ...

    def get_many(self, interrupt_ids: list[str]) -> dict[str, Approval]: ...

    def close(self, interrupt_id: str, status: str) -> bool:
        """Stop a pending request from being answered (the run expired or was cancelled).
        False if the inbox could not close it (the worker then refuses a late answer)."""

    def mark_ladder(self, interrupt_id: str, step: str) -> None:
        """Show reviewers that the request was reminded or escalated."""

    def shutdown(self) -> None:
        """Release connections; the inbox is not used afterwards."""
