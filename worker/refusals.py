"""Why a decision or a command was refused, typed, so each front end maps it to a code in one
place (the API to an HTTP status, the webhook to ``ignored``, the CLI to exit 2)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core.errors import UserError


class Refusal(StrEnum):
    UNKNOWN_RUN = "unknown run"
    NOT_WAITING = "not waiting"
    OTHER_INTERRUPT = "other interrupt"
    INVALID = "invalid decision"
    DUTIES = "separation of duties"
    QUORUM = "quorum"
    EXPIRED = "expired"
    TAKEN = "already claimed"
    STALE = "stale request"  # the decision names a digest of another request
    REPEATED = "already approved"  # this reviewer's approval is already counted


@dataclass(frozen=True)
class Refused:
    """A claim that did not happen; the run is unchanged (a refusal may be recorded as an event)."""

    reason: Refusal
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Pending:
    """An approval recorded toward a quorum that is not met yet; the run still waits."""

    approvers: list[str]
    quorum: int


class UnknownRun(UserError):
    """No run has that thread id."""


class NotCancellable(UserError):
    """The run already ended (done, expired, cancelled): there is nothing left to stop."""
