"""Which tool calls need a reviewer: a rule per gated tool, optionally waived under an amount.

The check lives here, in code, and never in a prompt: a model cannot talk its way past it. The
graph applies it once, when the model proposes the calls, and stores the verdict in the
checkpoint, so changing a threshold while a run waits cannot skip or misalign a pending review.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from store.errors import UserError


def _decimal(value: object) -> Decimal | None:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return amount if amount.is_finite() else None


@dataclass(frozen=True)
class ApprovalRule:
    """``tool`` needs a reviewer, unless ``amount(args)`` is under the configured threshold.

    With no ``amount`` (or no ``threshold_setting``) every call is reviewed. An amount that
    cannot be read from the arguments is reviewed too: unknown never means small.
    """

    tool: str
    amount: Callable[[dict], object] | None = None
    threshold_setting: str | None = None
    default_threshold: str = "0"

    def threshold(self) -> Decimal:
        if not self.threshold_setting:
            return Decimal(0)
        raw = os.environ.get(self.threshold_setting) or self.default_threshold
        value = _decimal(raw)
        if value is None or value < 0:
            raise UserError(
                f"{self.threshold_setting}={raw!r} is not an amount; "
                f"set it to a number like {self.default_threshold} (0 reviews every call)"
            )
        return value

    def needs_review(self, args: dict) -> bool:
        threshold = self.threshold()
        if self.amount is None or threshold <= 0:
            return True
        try:
            amount = _decimal(self.amount(args))
        except (KeyError, TypeError, ValueError, ArithmeticError):
            return True
        return amount is None or amount >= threshold


@dataclass(frozen=True)
class Policy:
    """The rules of one workflow; tools without a rule run without a reviewer."""

    rules: tuple[ApprovalRule, ...] = field(default_factory=tuple)

    def check_settings(self) -> None:
        """Refuse (``UserError``) a bad threshold setting before a run starts, not inside it."""
        for rule in self.rules:
            rule.threshold()

    def gated_tools(self) -> set[str]:
        return {r.tool for r in self.rules}

    def needs_review(self, name: str, args: dict) -> bool:
        return any(r.needs_review(args) for r in self.rules if r.tool == name)
