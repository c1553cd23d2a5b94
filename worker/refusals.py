"""The one way the worker refuses: a reason from one enum and a message that says what to do.

A decision's refusal is returned (``worker.decisions``); a command's (cancel, retry) is raised.
Either way it is a :class:`Refused`, which each front end maps in one place: the API to an HTTP
status (``api.errors``), a webhook to ``ignored``, the command line to ``error: ...`` and exit 2
(it is a ``UserError``). A refusal changes no table.
"""

from __future__ import annotations

from enum import StrEnum

from core.errors import UserError


class Refusal(StrEnum):
    UNKNOWN_RUN = "unknown run"
    NOT_WAITING = "not waiting"  # cancelled, failed, running: there is nothing to decide
    DECIDED = "already decided"  # another decision was applied first
    OTHER_INTERRUPT = "other interrupt"
    STALE = "stale request"  # the decision names a digest of another request
    INVALID = "invalid decision"  # malformed, not allowed, off the schema, a locked argument
    DUTIES = "separation of duties"
    AUTHORITY = "no authority"  # the approver holds none of the groups the amount's band needs
    DELEGATION = "no delegation"  # acting for someone who has not delegated to them, now
    DISAGREE = "approvers disagree"  # approvers of one quorum gave different decisions
    REPEATED = "already approved"  # this reviewer's approval is already counted
    EXPIRED = "expired"
    NOT_CANCELLABLE = "not cancellable"  # the run already ended
    NOT_FAILED = "not failed"  # only failed runs retry
    ID_TAKEN = "run id taken"  # every id drawn for a new run named an existing one
    HALTED = "halted"  # the stop button: the workflow, a tool of the request, or everything
    UNAUTHORIZED = "unauthorized"  # no credential valid now vouches for the decider (revoked)


class Refused(UserError):
    """Nothing happened, and why. Compares by reason and message. ``message`` is in the
    reviewer's words (times in the display zone, no ids); ``details`` holds what support or a
    program needs besides (the request's id, ISO 8601 UTC times), shown only on asking."""

    def __init__(self, reason: Refusal, message: str, details: dict[str, str] | None = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Refused) and (other.reason, other.message) == (
            self.reason,
            self.message,
        )

    def __hash__(self) -> int:
        return hash((self.reason, self.message))

    def __repr__(self) -> str:
        return f"Refused({self.reason.name}, {self.message!r})"


def halted(halt: object) -> Refused:
    """The one form of "halted", for a start or a decision a halt stops."""
    return Refused(Refusal.HALTED, f"halted: {halt} (`approval-worker unhalt` lifts it)")


def unknown_run(thread_id: str) -> Refused:
    """The one form of "no such run", whichever entry point asked."""
    return Refused(Refusal.UNKNOWN_RUN, f"no run {thread_id[:200]!r}")
