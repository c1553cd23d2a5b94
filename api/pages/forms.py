"""Decision forms built from a tool's JSON schema, and the posted form turned back into HITL
decisions: a field per argument (numbers, strings, enums, booleans; locked arguments read-only),
each checked here so an error can be shown beside its field before anything is decided.

No decision is pre-selected: the button pressed names it, and a post whose decision and fields
disagree (an approve carrying changed values or a reason, an approve-with-changes changing
nothing, a reject without a reason) is refused beside the field, so what is approved is what the
reviewer read and typed."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.errors import UserError
from core.hitl import HitlRequest
from core.hitl_decisions import Approve, Decisions, Edit, Reject, Respond, Verdict
from core.limits import parse_json
from core.money import DEFAULT_LOCALE, AmountError, money, parse_amount
from inbox.views import ActionView, generic_view, value_text

LABELS = {
    "approve": "Approve",
    "edit": "Approve with changes",
    "reject": "Reject",
    "respond": "Respond",
}


@dataclass
class Field:
    name: str
    kind: str  # number, integer, money, string, enum, boolean
    value: Any
    label: str
    locked: bool = False
    options: list[Any] = field(default_factory=list)
    error: str | None = None
    derived: bool = False  # follows from other arguments (shown, never typed)
    currency: str | None = None  # money: the amount's currency (its minor unit, its format)
    proposed: str | None = None  # money: the proposed amount as the reviewer's locale writes it
    names: dict[str, str] = field(default_factory=dict)  # enum: each option's name, if it has one


@dataclass
class ActionForm:
    index: int
    name: str
    description: str
    args: dict[str, Any]
    allowed: list[str]
    fields: list[Field]
    choice: str
    reason: str = ""
    error: str | None = None
    reason_error: str | None = None
    view: ActionView | None = None
    locale: str = DEFAULT_LOCALE  # how the reviewer writes numbers

    @property
    def editable(self) -> bool:
        return "edit" in self.allowed and any(not f.locked for f in self.fields)

    @property
    def editing(self) -> bool:
        """Show the edit fields open: the reviewer chose to edit, or one of them is wrong."""
        return self.choice == "edit" or any(f.error for f in self.fields)


def _kind(spec: dict) -> tuple[str, list[Any]]:
    if "enum" in spec:
        return "enum", list(spec["enum"])
    for option in spec.get("anyOf") or []:  # Optional[...] from pydantic
        if option.get("type") not in (None, "null"):
            spec = option
            break
    kind = spec.get("type", "string")
    return (kind if kind in ("number", "integer", "boolean") else "string"), []


def written(value: Any, locale: str) -> str:
    """A proposed number as the reviewer's locale writes it, with no group separator, so the
    text in the field reads back as the same number (``329,00`` in German)."""
    from babel.numbers import get_decimal_symbol

    return str(value).replace(".", get_decimal_symbol(locale))


def action_forms(
    request: HitlRequest,
    schemas: dict[str, dict],
    views: list[ActionView] | None = None,
    locale: str = DEFAULT_LOCALE,
    derived: dict[str, list[str]] | None = None,
    choices: Callable[[str], dict[str, list[tuple[str, str]]]] | None = None,
) -> list[ActionForm]:
    """One form section per proposed action, prefilled with the proposed arguments; nothing is
    chosen until the reviewer presses a decision's button. An argument the workflow's view
    shows as money is an amount field in its currency, written the reviewer's way; one it
    offers ``choices`` for (a catalogue's suppliers) is picked from them by name."""
    typed = request
    forms = []
    for i, action in enumerate(typed.actions):
        args = action.args
        schema = schemas.get(action.name) or {}
        props = schema.get("properties") or {k: {} for k in args}
        follows = set((derived or {}).get(action.name, ()))
        locked = set(typed.locked(i)) | follows
        view = views[i] if views and i < len(views) else generic_view(action, schema)
        currencies = {f.name: f.currency for f in view.fields if f.name and f.currency}
        labels = {f.name: f.label for f in view.fields if f.name}  # the workflow's words
        picks = choices(action.name) if choices is not None else {}
        fields = []
        for name, spec in props.items():
            kind, options = _kind(spec)
            label = labels.get(name) or spec.get("title") or name
            value = args.get(name, spec.get("default"))
            one = Field(name, kind, value, label, name in locked, options, derived=name in follows)
            if name in currencies and not isinstance(value, bool):
                one.kind, one.currency = "money", currencies[name]
                one.value = one.proposed = written(_plain_amount(value, one.currency), locale)
            elif name in picks and not one.locked:
                one.kind, one.options = "enum", [v for v, _ in picks[name]]
                one.names = dict(picks[name])
            fields.append(one)
        allowed = typed.allowed(i)
        description = action.description or ""
        form = ActionForm(i, action.name, description, args, allowed, fields, "", view=view)
        form.locale = locale
        forms.append(form)
    return forms


def _plain_amount(value: Any, currency: str) -> str:
    """``329.00`` for a proposed 329.0 in EUR: the currency's decimals when that is exact."""
    from core.money import exact

    try:
        return f"{exact(value, currency):f}"
    except AmountError:
        return str(value)


def _parse(f: Field, raw: str | None, locale: str = DEFAULT_LOCALE) -> Any:
    """The field's posted text as its schema type, numbers read the way ``locale`` writes them
    (ValueError with a message for the page). An amount is carried as its exact decimal text
    (``"1.50"``): JSON has no decimal type, and a float would not hold it."""
    if f.kind == "boolean":
        return raw == "on"
    raw = (raw or "").strip()
    if f.kind == "money":
        return f"{parse_amount(raw, locale, f.currency):f}"
    if f.kind in ("number", "integer"):
        number = parse_amount(raw, locale, unit=0 if f.kind == "integer" else None)
        if f.kind == "integer":
            return int(number)
        return number  # exact: a Decimal to the resume (``core.exactjson`` stores it as typed)
    if f.kind == "enum":
        match = [o for o in f.options if str(o) == raw]
        if not match:
            raise ValueError("choose one of the options")
        return match[0]
    return raw


def read_decisions(
    forms: list[ActionForm], posted: dict[str, str], schemas: dict[str, dict]
) -> list[dict] | None:
    """:func:`read_form` as JSON, for callers that hand the decision on as it is."""
    decisions = read_form(forms, posted, schemas)
    return None if decisions is None else decisions.to_json()


def _same(f: Field, parsed: Any, proposed: Any) -> bool:
    if f.kind in ("money", "number"):
        from decimal import Decimal

        try:
            return Decimal(str(parsed)) == Decimal(str(proposed))
        except ArithmeticError:
            return False
    return bool(parsed == proposed)


def _unchanged(f: Field, proposed: Any, raw: str | None, locale: str) -> bool:
    """Whether the posted text still says the proposed value (an absent field does)."""
    if raw is None and f.kind != "boolean":
        return True
    try:
        return _same(f, _parse(f, raw, locale), proposed)
    except ValueError:
        return False


def read_form(
    forms: list[ActionForm], posted: dict[str, str], schemas: dict[str, dict]
) -> Decisions | None:
    """The decisions the form says, or None after marking each bad field with its error."""
    import jsonschema

    decisions: list[Verdict] = []
    ok = True
    for form in forms:
        choice = posted.get(f"d{form.index}", "")
        form.choice = choice
        form.reason = posted.get(f"reason{form.index}", "")
        text = form.reason.strip()
        if choice not in form.allowed:
            form.error = f"choose one of: {', '.join(LABELS[a] for a in form.allowed)}"
            ok = False
            continue
        if choice == "approve":
            for f in form.fields:
                raw = posted.get(f"a{form.index}.{f.name}")
                if not f.locked and not _unchanged(f, form.args.get(f.name), raw, form.locale):
                    f.value = raw
                    was = f.proposed if f.proposed is not None else form.args.get(f.name)
                    f.error = (
                        "you changed this value: press “Approve with changes”, or put back "
                        f"{was!s} to approve as proposed"
                    )
                    ok = False
            if text:
                form.reason_error = (
                    "you wrote a reason: press Reject to reject, or clear it to approve"
                )
                ok = False
            decisions.append(Approve())
        elif choice in ("reject", "respond"):
            if not text:
                form.reason_error = (
                    "write why you reject it" if choice == "reject" else "write the message"
                )
                ok = False
            decisions.append(Reject(text or None) if choice == "reject" else Respond(text or None))
        else:
            args = dict(form.args)
            for f in form.fields:
                raw = posted.get(f"a{form.index}.{f.name}")
                f.value = raw if f.kind != "boolean" else raw == "on"
                if f.locked:
                    f.value = f.proposed if f.proposed is not None else form.args.get(f.name)
                    continue
                try:
                    parsed = _parse(f, raw, form.locale)
                except ValueError as exc:
                    f.error, ok = str(exc), False
                    continue
                if not _same(f, parsed, form.args.get(f.name)):
                    args[f.name] = parsed  # an unchanged amount keeps the proposal's own form
            if ok and args == form.args:
                form.error = "nothing was changed: press Approve to approve as proposed"
                ok = False
            schema = schemas.get(form.name)
            if ok and schema:
                for error in jsonschema.Draft202012Validator(schema).iter_errors(args):
                    where = str(error.absolute_path[0]) if error.absolute_path else None
                    target = next((f for f in form.fields if f.name == where), None)
                    if target is not None:
                        target.error = error.message
                    else:
                        form.error = error.message
                    ok = False
            decisions.append(Edit(args, form.name))
    return Decisions(tuple(decisions)) if ok else None


def preview(
    forms: list[ActionForm], posted: dict[str, str]
) -> tuple[list[str], list[str], dict[int, dict[str, Any]]]:
    """What "Approve with changes" would approve, read the way the decision will read it: each
    changed value as parsed (an amount in its currency, the reviewer's way), each value that
    cannot be read, with why (an ambiguous amount names both readings), and each changed
    action's arguments by position."""
    changed, errors = [], []
    edited: dict[int, dict[str, Any]] = {}
    for form in forms:
        for f in form.fields:
            raw = posted.get(f"a{form.index}.{f.name}")
            if f.locked or raw is None or f.kind == "boolean":
                continue
            try:
                parsed = _parse(f, raw, form.locale)
            except ValueError as exc:
                errors.append(f"{f.label}: {exc}")
                continue
            proposed = form.args.get(f.name)
            if not _same(f, parsed, proposed):
                edited.setdefault(form.index, dict(form.args))[f.name] = parsed
                was, now = (
                    (money(v, f.currency, form.locale) for v in (proposed, parsed))
                    if f.kind == "money" and f.currency
                    else (f.names.get(str(v), str(v)) for v in (proposed, parsed))
                )
                changed.append(f"{f.label} {was} → {now}")
    return changed, errors, edited


def mark_refusal(forms: list[ActionForm], message: str) -> None:
    """Put the one decision path's refusal of an approving answer (``check_edit``: "amount:
    ...") beside the field it names when the reviewer changed it, else on the action."""
    text = message.removeprefix("invalid decision: ")
    name, sep, rest = text.partition(": ")
    for form in forms:
        if form.choice not in ("edit", "approve"):
            continue
        target = next((f for f in form.fields if sep and f.name == name), None)
        if target is not None and form.choice == "edit":
            target.error = rest
        else:
            form.error = "Refused: " + (rest if target is not None else text)
        return


def seen(request: HitlRequest) -> str:
    """What the reviewer was shown (names and arguments), carried in the form to explain a
    refusal when the request changed under them."""
    shown = request.shown()
    return json.dumps(shown, sort_keys=True, separators=(",", ":"))


def _shown_pair(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], dict | None)
    )


def changes(shown: str, request: HitlRequest) -> list[str]:
    """What differs between the request the form was built from and the one waiting now."""
    try:
        before = parse_json(shown.encode()) if len(shown) <= 100_000 else []
    except UserError:
        before = []
    after = json.loads(seen(request))
    if not isinstance(before, list):
        before = []
    # the posted copy is the browser's to forge: only [name, {args}] pairs are compared
    before = [b if _shown_pair(b) else None for b in before][: len(after) + 1]
    out = []
    for i in range(max(len(before), len(after))):
        old = before[i] if i < len(before) else None
        new = after[i] if i < len(after) else None
        if old == new:
            continue
        if old is None or new is None or old[0] != new[0]:
            out.append(f"action {i + 1}: {old and old[0]} is now {new and new[0]}")
            continue
        for key in sorted(set(old[1] or {}) | set(new[1] or {})):
            a, b = (old[1] or {}).get(key), (new[1] or {}).get(key)
            if a != b:
                what = f"{str(new[0]).replace('_', ' ')}: {str(key)[:100].replace('_', ' ')}"
                out.append(f"{what} was {value_text(a)[:200]}, is now {value_text(b)[:200]}")
    return out or ["the request was replaced by a new one"]
