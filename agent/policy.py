"""Which tool calls need a reviewer: a rule per gated tool, optionally waived under an amount.

The check lives here, in code, and never in a prompt: a model cannot talk its way past it. The
graph applies it once, when the model proposes the calls, and stores the verdict in the
checkpoint, so changing a threshold while a run waits cannot skip or misalign a pending review.
"""

from __future__ import annotations

import os
import re
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


DEFAULT_EXPIRES_IN = "48h"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | float | int, what: str = "the approval window") -> float:
    """Seconds from ``90``, ``90s``, ``30m``, ``2h`` or ``2d``; a mistake is a UserError, so a
    typo in a setting or a flag stops the run before it asks anyone anything."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        match = _DURATION.match(str(text))
        if not match:
            raise UserError(f"{what} {text!r} is not a duration; write it like 90s, 30m, 2h or 2d")
        seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if seconds <= 0:
        raise UserError(f"{what} {text!r} must be longer than zero")
    return seconds


def separation_of_duties() -> bool:
    """``SEPARATION_OF_DUTIES=1``: whoever requested a run may not approve it."""
    return (os.environ.get("SEPARATION_OF_DUTIES") or "0").strip().lower() in ("1", "true", "yes")


def ladder_points() -> tuple[float, float]:
    """Fractions of the approval window at which to remind (``APPROVAL_REMIND_AT``, 0.5) and
    to escalate (``APPROVAL_ESCALATE_AT``, 0.8); ``0`` turns a step off."""
    points = []
    for name, default in (("APPROVAL_REMIND_AT", "0.5"), ("APPROVAL_ESCALATE_AT", "0.8")):
        raw = os.environ.get(name) or default
        value = _decimal(raw)
        if value is None or not 0 <= value < 1:
            raise UserError(f"{name}={raw!r} must be a fraction of the window, like {default}")
        points.append(float(value))
    return points[0], points[1]


def expires_in_setting(setting: str | None) -> float:
    """The approval window a workflow's setting gives (``DEFAULT_EXPIRES_IN`` when unset)."""
    raw = (os.environ.get(setting) if setting else None) or os.environ.get("APPROVAL_EXPIRES_IN")
    return parse_duration(raw or DEFAULT_EXPIRES_IN, setting or "APPROVAL_EXPIRES_IN")


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
    quorum_amount_setting: str | None = None  # over this amount ...
    quorum_setting: str | None = None  # ... this many distinct approvers are needed

    def quorum(self, args: dict) -> int:
        """Distinct approvers a call needs: 1, or the quorum when its amount is over the
        quorum amount (an amount that cannot be read counts as over it)."""
        if not (self.quorum_amount_setting and self.quorum_setting):
            return 1
        raw_amount = os.environ.get(self.quorum_amount_setting)
        if not raw_amount:
            return 1
        limit = _decimal(raw_amount)
        raw_n = os.environ.get(self.quorum_setting) or "2"
        if limit is None or limit < 0 or not raw_n.isdigit() or int(raw_n) < 1:
            raise UserError(
                f"{self.quorum_amount_setting}={raw_amount!r} / {self.quorum_setting}={raw_n!r}: "
                "set an amount like 500 and a whole number of approvers like 2"
            )
        try:
            amount = _decimal(self.amount(args)) if self.amount else None
        except (KeyError, TypeError, ValueError, ArithmeticError):
            amount = None
        return int(raw_n) if amount is None or amount > limit else 1

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
    expires_setting: str | None = None  # e.g. REFUND_APPROVAL_EXPIRES_IN; else the global one

    def check_settings(self) -> None:
        """Refuse (``UserError``) a bad threshold setting before a run starts, not inside it."""
        for rule in self.rules:
            rule.threshold()
            rule.quorum({})
        self.expires_in()

    def quorum(self, name: str, args: dict) -> int:
        return max([r.quorum(args) for r in self.rules if r.tool == name] or [1])

    def expires_in(self) -> float:
        """Seconds a reviewer has to decide before the approval expires (safe default: reject)."""
        return expires_in_setting(self.expires_setting)

    def gated_tools(self) -> set[str]:
        return {r.tool for r in self.rules}

    def needs_review(self, name: str, args: dict) -> bool:
        return any(r.needs_review(args) for r in self.rules if r.tool == name)
