"""JSON that keeps a number exactly as a person typed it: a ``Decimal`` is written as the number
it is (``1.125``, never a float's nearest) and read back as a ``Decimal``.

Decisions are stored this way (the runs, approvals and answers rows, the audit trail's detail),
so a value a reviewer typed into a number field of any graph, with or without a money view, is
a ``Decimal`` from the page to the resume and exact text in between: no float ever holds it.
Everything else is written exactly as ``json.dumps`` writes it, so a row or a digest without a
``Decimal`` in it keeps its form.
"""

from __future__ import annotations

import json
import secrets
from decimal import Decimal
from typing import Any


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps(value, **kwargs)`` with each ``Decimal`` as its exact number literal."""
    numbers: dict[str, str] = {}
    nonce = secrets.token_hex(8)  # a per-call mark no text in ``value`` can spell

    def swap(v: Any) -> Any:
        if isinstance(v, Decimal):
            if not v.is_finite():
                raise ValueError(f"{v} is not a JSON number")
            mark = f"exact:{nonce}:{len(numbers)}"
            numbers[json.dumps(mark)] = format(v, "f")
            return mark
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [swap(x) for x in v]
        return v

    text = json.dumps(swap(value), **kwargs)
    for mark, number in numbers.items():
        text = text.replace(mark, number, 1)
    return text


def loads(text: str | bytes) -> Any:
    """JSON with every number that has a fraction or an exponent read as a ``Decimal``."""
    return json.loads(text, parse_float=Decimal)
