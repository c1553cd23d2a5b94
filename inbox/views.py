"""What a proposed action looks like to a person: a one-line summary in business terms and
labelled fields, money formatted with its currency.

A workflow may describe its actions itself (the optional ``describe(action)`` hook of
:class:`worker.workflows.Workflow`); any other graph gets :func:`generic_view`, built from the
tool's argument schema. The page, notifications and chat all render the same :class:`ActionView`,
so a reviewer reads the same words wherever the request reaches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from core.errors import UserError
from core.hitl import ActionRequest, HitlRequest
from core.hitl_decisions import Decisions
from core.money import money, places

__all__ = [
    "ActionView",
    "ViewField",
    "as_decided",
    "seen_as",
    "changed_fields",
    "generic_view",
    "money",
    "value_text",
]


@dataclass(frozen=True)
class ViewField:
    """One labelled value; ``name`` is the argument it shows (None: context, not an argument),
    ``currency`` says the argument is money in it (the form parses it as an amount)."""

    label: str
    text: str
    name: str | None = None
    currency: str | None = None


@dataclass(frozen=True)
class ActionView:
    """A proposed action for people: ``summary`` in one line, ``fields`` to read before
    deciding, and the money it moves (for lists and totals)."""

    summary: str
    fields: tuple[ViewField, ...] = ()
    amount: Decimal | None = None
    currency: str | None = None
    context: tuple[ViewField, ...] = field(default=())  # facts beside the arguments
    warning: str | None = None  # what the reviewer must know first (the policy's note, a limit)

    @property
    def amount_text(self) -> str:
        if self.amount is None:
            return ""
        return money(self.amount, self.currency) if self.currency else f"{self.amount:,.2f}"


def _label(name: str, spec: dict[str, Any]) -> str:
    """A person's words for an argument: its title, else its name; a trailing "id" is code
    (``customer_id``, pydantic's "Customer Id"), so it reads "Customer"."""
    title = spec.get("title")
    label = title if isinstance(title, str) and title else name.replace("_", " ").capitalize()
    bare = label[:-3] if label.lower().endswith(" id") else label
    return bare.strip() or label


def value_text(value: Any) -> str:
    """An argument's value as words: no JSON brackets or quotes for people."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float | Decimal):
        number = Decimal(repr(value)) if isinstance(value, float) else value
        if not number.is_finite():
            return str(value)
        if number == number.to_integral_value() and abs(number) >= 1_000_000:
            return f"{number:,.0f}"
        shown = number if places(number) > 2 else number.quantize(Decimal("0.01"))
        return f"{shown:,f}"  # every digit it has, never rounded to two
    if isinstance(value, list):
        return ", ".join(value_text(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k.replace('_', ' ')}: {value_text(v)}" for k, v in value.items())
    return str(value)


def generic_view(action: ActionRequest, schema: dict[str, Any] | None = None) -> ActionView:
    """A readable rendering of any tool call from its argument schema: labels from titles (or
    the argument names), values as words, the tool's description (or its name) as summary."""
    props = (schema or {}).get("properties") or {}
    names = list(props) + [k for k in action.args if k not in props]
    fields = tuple(
        ViewField(_label(n, props.get(n) or {}), value_text(action.args.get(n)), n)
        for n in names
        if n in action.args
    )
    words = action.name.replace("_", " ").capitalize()
    shown = ", ".join(f"{f.label.lower()} {f.text}" for f in fields[:3])
    summary = f"{words}: {shown}" if shown else words
    amount = action.args.get("amount")
    number = Decimal(str(amount)) if isinstance(amount, int | float | Decimal) else None
    return ActionView(summary, fields, number)


def changed_fields(before: ActionView, after: ActionView) -> list[tuple[str, str, str]]:
    """(label, old, new) for each argument whose words differ between two views of a call,
    then each fact beside them that follows from the arguments (a purchase order's total)."""
    old = {f.name: f for f in before.fields if f.name}
    out = []
    for f in after.fields:
        if f.name is None:
            continue
        was = old.get(f.name)
        if was is None or was.text != f.text:
            out.append((f.label, was.text if was else "—", f.text))
    facts = {f.label: f.text for f in before.context}
    for f in after.context:
        if f.label in facts and facts[f.label] != f.text:
            out.append((f.label, facts[f.label], f.text))
    return out


def as_decided(request: HitlRequest, decision: Any) -> HitlRequest:
    """The request as its decision runs it: each edit's arguments in place of the proposal's,
    so whatever shows a decided run (Slack, e-mail, webhooks, the Decided list) says the amount
    approved, not the one proposed. Anything unreadable is left as proposed."""
    if not isinstance(decision, dict) or not decision.get("decisions"):
        return request
    try:
        return request.edited(Decisions.parse(decision).items)
    except (UserError, TypeError, ValueError):
        return request


def seen_as(view: ActionView) -> dict[str, Any]:
    """What the reviewer was shown when the action was proposed (its summary and the facts
    beside it), kept with the pause so history reads the figures of that moment, not today's."""
    return {"summary": view.summary, "context": [[f.label, f.text] for f in view.context]}
