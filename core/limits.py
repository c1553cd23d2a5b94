"""Bounds on everything that enters from outside: JSON that is finite, shallow and valid text,
and strings of bounded size without NUL or lone surrogates.

A value that passes :func:`check_value` can be stored (Postgres refuses NUL in text; a lone
surrogate cannot be encoded) and resumed (a deeply nested value breaks serialisation on every
retry), so a refusal here, before any claim, is what keeps one bad decision from poisoning a run.
"""

from __future__ import annotations

import json
import math
from typing import Any

from core import settings
from core.errors import UserError
from core.identity import unclear


class Refused(UserError):
    """Input outside the bounds; the message names where and why (never the value itself)."""


def check_text(value: str, what: str, limit: int | None = None) -> str:
    limit = limit if limit is not None else settings.MAX_TEXT_CHARS.get()
    if len(value) > limit:
        raise Refused(f"{what} is longer than {limit} characters")
    if "\x00" in value:
        raise Refused(f"{what} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(f"{what} contains a lone surrogate (not valid text)") from None
    return value


def check_value(value: Any, what: str, *, max_depth: int | None = None) -> Any:
    """Walk ``value`` without recursion: finite numbers, bounded depth, valid bounded text."""
    depth_limit = max_depth if max_depth is not None else settings.MAX_JSON_DEPTH.get()
    stack: list[tuple[Any, int, str]] = [(value, 1, what)]
    while stack:
        item, depth, where = stack.pop()
        if depth > depth_limit:
            raise Refused(f"{what} is nested deeper than {depth_limit} levels")
        if isinstance(item, float) and not math.isfinite(item):
            raise Refused(f"{where} is not a finite number")
        if isinstance(item, str):
            check_text(item, where, settings.MAX_INPUT_CHARS.get())
        elif isinstance(item, dict):
            for key, child in item.items():
                check_text(str(key), f"{where} key", settings.MAX_TEXT_CHARS.get())
                stack.append((child, depth + 1, f"{where}.{key}"))
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1, f"{where}[{i}]") for i, child in enumerate(item))
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(body: bytes | str, what: str = "body") -> Any:
    """Strict JSON: valid UTF-8, no ``NaN``/``Infinity``, bounded depth, valid text."""
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
        value = json.loads(text, parse_constant=_no_constants)
    except UnicodeDecodeError:
        raise Refused(f"{what} is not UTF-8") from None
    except RecursionError:
        raise Refused(f"{what} is nested too deeply") from None
    except ValueError as exc:
        raise Refused(f"{what} is not valid JSON: {str(exc).splitlines()[0][:200]}") from None
    return check_value(value, what)


# Characters a name may not hold: controls, invisible formatting (zero-width, bidirectional
# overrides), unassigned or private ones, line and paragraph separators, and the list separators
# a command line or a header would split on. Spaces other than U+0020 become it under NFKC.
_NAME_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NAME_SEPARATORS = frozenset(",;|")


def check_name(value: object, what: str = "a name") -> str:
    """A person's name as it may identify them: NFKC-normalised, spaces collapsed, 1 to 200
    characters, none of them a control, format or separator character, nothing that renders
    blank and no confusable mix of scripts (:func:`core.identity.unclear`); else ``Refused``.
    Every door a name comes in by (keys, JWT subjects, delegations, Slack links, webhooks,
    the CLI) calls this."""
    import unicodedata

    if not isinstance(value, str):
        raise Refused(f"{what} must be text")
    check_text(value, what, 1000)
    text = unicodedata.normalize("NFKC", value)
    name = " ".join(text.split())
    if not name or len(name) > 200:
        raise Refused(f"{what} must be 1 to 200 characters")
    for char in text:
        if char in _NAME_SEPARATORS or unicodedata.category(char) in _NAME_CATEGORIES:
            raise Refused(
                f"{what} may not hold control, format or separator characters "
                f"(U+{ord(char):04X}); one name per person"
            )
    why = unclear(name)
    if why is not None:
        raise Refused(f"{what} {why}")
    return name
