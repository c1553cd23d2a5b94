"""Which tool calls of the demo workflows need a reviewer, and how many approvers.

A rule per gated tool, optionally waived under an amount, with a quorum over a larger amount,
and optionally a standing read from the ledger: a call beyond what the business still allows
(more than an order has left to refund) is refused before any reviewer sees it, and a call with
history (an earlier refund, another open request) always goes to a reviewer, told why.
The check lives here, in code, and never in a prompt: a model cannot talk its way past it. The
graph applies it once, when the model proposes the calls, and stores the verdict in the
checkpoint, so changing a threshold while a run waits cannot skip or misalign a pending review.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from agent.ledger import Ledger
from core.settings import Setting
from worker.policy import window


def _decimal(value: object) -> Decimal | None:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return amount if amount.is_finite() else None


def _read(amount: Callable[[dict], object] | None, args: dict) -> Decimal | None:
    """The call's amount, or None if it cannot be read (unknown never means small)."""
    if amount is None:
        return None
    try:
        return _decimal(amount(args))
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return None


@dataclass(frozen=True)
class Standing:
    """What the ledger already holds against a proposed call."""

    problem: str | None = None  # refused before a reviewer: beyond what is left
    note: str | None = None  # reviewed whatever the threshold; the request says why


@dataclass(frozen=True)
class ApprovalRule:
    """``tool`` needs a reviewer, unless ``amount(args)`` is under the threshold setting; over
    the quorum amount it needs ``quorum`` distinct approvers.

    With no ``amount`` (or no threshold) every call is reviewed. An amount that cannot be read
    is reviewed, and counts as over the quorum amount.
    """

    tool: str
    amount: Callable[[dict], object] | None = None
    threshold: Setting[Decimal] | None = None
    quorum_amount: Setting[Decimal | None] | None = None
    quorum_size: Setting[int] | None = None
    standing: Callable[[Ledger, str, dict], Standing] | None = None  # (ledger, thread, args)
    # the business object the amount is counted on for authority (``order:A-1002``)
    subject: Callable[[dict], str] | None = None

    def quorum(self, args: dict) -> int:
        limit = self.quorum_amount.get() if self.quorum_amount else None
        if limit is None or self.quorum_size is None:
            return 1
        value = _read(self.amount, args)
        return self.quorum_size.get() if value is None or value > limit else 1

    def needs_review(self, args: dict) -> bool:
        threshold = self.threshold.get() if self.threshold else Decimal(0)
        if self.amount is None or threshold <= 0:
            return True
        value = _read(self.amount, args)
        return value is None or value >= threshold


@dataclass(frozen=True)
class Policy:
    """The rules of one workflow; tools without a rule run without a reviewer."""

    rules: tuple[ApprovalRule, ...] = field(default_factory=tuple)
    expires: Setting[float | None] | None = None  # e.g. REFUND_APPROVAL_EXPIRES_IN; else the global

    def quorum(self, name: str, args: dict) -> int:
        return max([r.quorum(args) for r in self.rules if r.tool == name] or [1])

    def expires_in(self) -> float:
        """Seconds a reviewer has to decide before the approval expires (safe default: reject)."""
        return window(self.expires)

    def amount(self, name: str, args: dict) -> Decimal | None:
        """The call's amount by its rule (None: no rule with an amount, or unreadable)."""
        values = [_read(r.amount, args) for r in self.rules if r.tool == name]
        known = [v for v in values if v is not None]
        return max(known) if known and len(known) == len(values) else None

    def subject(self, name: str, args: dict) -> str | None:
        """What the call's amount is counted on (an order, a cost center), by its rule; None:
        no rule names one, or it cannot be read."""
        for rule in self.rules:
            if rule.tool == name and rule.subject is not None:
                try:
                    return str(rule.subject(args))
                except (KeyError, TypeError, ValueError):
                    return None
        return None

    def gated_tools(self) -> set[str]:
        return {r.tool for r in self.rules}

    def needs_review(self, name: str, args: dict) -> bool:
        return any(r.needs_review(args) for r in self.rules if r.tool == name)

    def standing(self, name: str, args: dict, ledger: Ledger, thread_id: str) -> Standing:
        """The first problem of any rule for the call, else every rule's note together."""
        found = [
            r.standing(ledger, thread_id, args) for r in self.rules if r.tool == name and r.standing
        ]
        problem = next((s.problem for s in found if s.problem), None)
        notes = [s.note for s in found if s.note]
        return Standing(problem, " ".join(notes) or None)
