"""The kinds of value a setting can hold, and :class:`Setting`, which reads and checks one."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Generic, TypeVar

from core.errors import UserError

T = TypeVar("T")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class Invalid(ValueError):
    """A value a parser refuses; the message says what is expected (never echoes a secret)."""


def parse_duration(text: str | float | int, what: str = "the approval window") -> float:
    """Seconds from ``90``, ``90s``, ``30m``, ``2h`` or ``2d`` (a finite number of seconds too)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
        if not math.isfinite(seconds):
            raise UserError(f"{what} must be a finite duration")
    else:
        match = _DURATION.match(str(text))
        if not match:
            raise UserError(f"{what} {text!r} is not a duration; write it like 90s, 30m, 2h or 2d")
        seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if seconds <= 0:
        raise UserError(f"{what} {text!r} must be longer than zero")
    if seconds > 10 * 365 * 86400:
        raise UserError(f"{what} {text!r} is longer than ten years")
    return seconds


def text(raw: str) -> str:
    return raw


def secret(raw: str) -> str:
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        raise Invalid("contains a control character (a stray newline?)")
    return raw.strip()


MIN_WEBHOOK_SECRET_BYTES = 24


def webhook_secrets(raw: str) -> tuple[str, ...]:
    """One or more ``whsec_<base64>`` secrets, space separated (several while rotating), each of
    at least 24 random bytes: the Standard Webhooks library itself accepts a 1-byte secret."""
    import base64
    import binascii

    values = tuple(secret(raw).split())
    for i, value in enumerate(values, 1):
        body = value.removeprefix("whsec_")
        try:
            decoded = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise Invalid(f"secret {i} is not whsec_ followed by base64") from None
        if not value.startswith("whsec_") or len(decoded) < MIN_WEBHOOK_SECRET_BYTES:
            raise Invalid(
                f"secret {i} must be whsec_ and at least {MIN_WEBHOOK_SECRET_BYTES} random bytes "
                "in base64"
            )
    return values


def names(raw: str) -> tuple[str, ...]:
    """A list separated by commas or spaces."""
    return tuple(v for v in raw.replace(",", " ").split() if v)


def flag(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise Invalid("must be 1 or 0")


def integer(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise Invalid("must be a whole number") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            raise Invalid(f"must be {bound}")
        return value

    return parse


def number(minimum: float, maximum: float | None = None) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise Invalid("must be a number") from None
        if not math.isfinite(value) or value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            raise Invalid(f"must be a number {bound}")
        return value

    return parse


def fraction(raw: str) -> float:
    value = number(0.0, 1.0)(raw)
    if value >= 1:
        raise Invalid("must be a fraction of the window, at least 0 and below 1")
    return value


def amount(raw: str) -> Decimal:
    try:
        value = Decimal(raw.strip())
    except (InvalidOperation, ValueError):
        raise Invalid("must be an amount like 20.00") from None
    if not value.is_finite() or value < 0:
        raise Invalid("must be an amount of 0 or more, like 20.00")
    return value


def duration(raw: str) -> float:
    try:
        return parse_duration(raw, "value")
    except UserError:
        raise Invalid(
            "is not a duration of more than zero; write it like 90s, 30m, 2h or 2d"
        ) from None


def rate(raw: str) -> tuple[int, float] | None:
    """``30/1m``: at most 30 per minute; ``0``: no limit (None)."""
    if raw.strip() == "0":
        return None
    count, _, window = raw.partition("/")
    try:
        limit = int(count.strip())
        seconds = parse_duration(window.strip(), "value")
    except (ValueError, UserError):
        raise Invalid("must be a rate like 30/1m (30 per minute), or 0 for no limit") from None
    if limit < 1:
        raise Invalid("must allow at least 1 (or be 0 for no limit)")
    return limit, seconds


def choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw.strip() not in options:
            raise Invalid(f"must be one of: {', '.join(options)}")
        return raw.strip()

    return parse


def postgres_url(raw: str) -> str:
    if not raw.startswith(("postgresql://", "postgres://")):
        raise Invalid("must start with postgresql:// (unset it to use SQLite)")
    return raw


def http_url(raw: str) -> str:
    if not raw.startswith(("https://", "http://")):
        raise Invalid("must start with https://")
    return raw


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable. ``default`` None means unset (``get`` returns None)."""

    name: str
    parse: Callable[[str], T]
    default: str | None
    meaning: str
    group: str
    shown: str | None = None  # the default as the README puts it, when not the raw default
    example: str | None = None  # a placeholder for .env.example (commented out)
    sensitive: bool = False

    def raw(self) -> str | None:
        value = os.environ.get(self.name)
        return value if value not in (None, "") else self.default

    def explicit(self) -> bool:
        """Whether the environment sets it (a default is not a choice someone made)."""
        return os.environ.get(self.name) not in (None, "")

    def get(self) -> T:
        raw = self.raw()
        if raw is None:
            return None  # type: ignore[return-value]  # declared as Setting[X | None]
        try:
            return self.parse(raw)
        except Invalid as exc:
            shown = "" if self.sensitive else f"={raw!r}"
            raise UserError(f"{self.name}{shown} {exc}") from None
