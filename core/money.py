"""Money as people write it and read it: a ``Decimal`` in an ISO 4217 currency, parsed with the
reader's locale and formatted the same way, never a float.

A typed amount is read the way the reviewer's locale writes numbers (``1,50`` is one euro fifty
in German). When the other common convention (``.`` and ``,`` swapped) gives a different amount
that is just as possible, the text is refused with both readings rather than guessed; so is text
the locale would not write at all (``1,50`` in English), and any amount with more decimals than
the currency has (ISO 4217 minor unit: EUR 2, JPY 0, KWD 3), which is never rounded.

Babel is imported on first use, so a process that never reads or shows money never loads it.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

DEFAULT_LOCALE = "en"
_DIGITS = re.compile(r"[0-9]+")
_BLANKS = re.compile(r"[\s\u00a0\u202f\u2009]+")
_APOSTROPHES = "'’"


class AmountError(ValueError):
    """Typed text that is not one amount: the message says why, and the readings it allows."""


def minor_unit(currency: str) -> int:
    """How many decimals the currency has (ISO 4217): EUR 2, JPY 0, KWD 3."""
    from babel.numbers import get_currency_precision

    return int(get_currency_precision(currency.upper()))


def places(value: Decimal) -> int:
    """The decimals a value needs (trailing zeros carry nothing: ``1.50`` needs 1)."""
    exponent = value.normalize().as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


def locale_of(tag: str | None) -> str:
    """A known Babel locale for a language tag (``de-DE``, ``en_GB``), else the default."""
    from babel import Locale, UnknownLocaleError

    try:
        return str(Locale.parse((tag or "").strip().replace("-", "_")))
    except (UnknownLocaleError, ValueError, TypeError):
        return DEFAULT_LOCALE


def preferred_locale(accept_language: str | None) -> str:
    """The first language of an ``Accept-Language`` header Babel knows, by weight."""
    weighted = []
    for i, part in enumerate((accept_language or "")[:500].split(",")):
        tag, _, q = part.strip().partition(";q=")
        try:
            weight = float(q) if q else 1.0  # a header weight, not money
        except ValueError:
            continue
        if tag and tag != "*":
            weighted.append((-weight, i, tag))
    for _, _, tag in sorted(weighted):
        found = locale_of(tag)
        if found != DEFAULT_LOCALE or tag.lower().startswith(DEFAULT_LOCALE):
            return found
    return DEFAULT_LOCALE


def exact(value: Any, currency: str) -> Decimal:
    """A stored or posted amount as a Decimal in the currency, refused (never rounded) when it
    has more decimals than the currency allows; a float is read by its shortest text."""
    if isinstance(value, bool):
        raise AmountError(f"{value!r} is not an amount")
    try:
        amount = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise AmountError(f"{str(value)[:40]!r} is not an amount") from None
    if not amount.is_finite():
        raise AmountError(f"{str(value)[:40]!r} is not an amount")
    unit = minor_unit(currency)
    if places(amount) > unit:
        raise AmountError(_too_precise(str(value), currency, unit, amount))
    return amount.quantize(Decimal(1).scaleb(-unit))


def money(amount: Any, currency: str, locale: str = DEFAULT_LOCALE) -> str:
    """``EUR 329.00`` (``EUR 329,00`` in German): the ISO code first, so it reads the same for
    every currency, with the currency's own decimals."""
    try:
        value = Decimal(str(amount))
    except (InvalidOperation, ValueError):
        return str(amount)
    from babel.numbers import format_currency

    return format_currency(
        value, currency, format="¤¤ #,##0.00", locale=locale, currency_digits=True
    )


def _symbols(locale: str) -> tuple[str, str]:
    from babel.numbers import get_decimal_symbol, get_group_symbol

    return get_decimal_symbol(locale), get_group_symbol(locale)


def _read(text: str, dec: str, grp: str) -> Decimal | None:
    """``text`` written with decimal symbol ``dec`` and group symbol ``grp``: groups of three
    after a first group of one to three digits, at most one decimal symbol; else None."""
    sign = "-" if text.startswith("-") else ""
    body = text[1:] if text[:1] in "+-" else text
    whole, has_dec, frac = body.partition(dec)
    if has_dec and not _DIGITS.fullmatch(frac):
        return None
    groups = whole.split(grp) if grp and grp != dec else [whole]
    if not all(_DIGITS.fullmatch(g) for g in groups):
        return None
    if len(groups) > 1 and not (
        len(groups[0]) <= 3 and groups[0][0] != "0" and all(len(g) == 3 for g in groups[1:])
    ):
        return None
    return Decimal(sign + "".join(groups) + ("." + frac if has_dec else ""))


def _too_precise(text: str, currency: str, unit: int, value: Decimal) -> str:
    def decimals(n: int) -> str:
        return f"{n} decimal{'s' if n != 1 else ''}" if n else "no decimals"

    return (
        f"{text.strip()[:40]} has {decimals(places(value))} but {currency} has {decimals(unit)}: "
        "amounts are not rounded, type the exact amount"
    )


def _clean(text: str, currency: str | None, grp: str) -> str:
    text = text.strip()
    if currency:
        text = re.sub(rf"^{currency}\s*|\s*{currency}$", "", text, flags=re.IGNORECASE).strip()
    if _BLANKS.fullmatch(grp or "x"):  # French and others group with a (narrow) space
        text = _BLANKS.sub(grp, text)
    if grp in _APOSTROPHES:
        text = text.translate({ord(a): grp for a in _APOSTROPHES})
    return text


def parse_amount(
    text: str, locale: str = DEFAULT_LOCALE, currency: str | None = None, unit: int | None = None
) -> Decimal:
    """The number ``text`` says in ``locale``; with a currency, an amount in it (its minor unit
    caps the decimals, ``unit`` overrides). Raises :class:`AmountError` with the readings."""
    if currency is not None and unit is None:
        unit = minor_unit(currency)
    dec, grp = _symbols(locale)
    text = _clean(text[:100], currency, grp)
    if not text:
        raise AmountError("enter an amount" if currency else "enter a number")
    # the other common way of writing numbers: "." and "," swapped
    alt_dec = "." if dec != "." else ","
    alt_grp = "," if alt_dec == "." else "."

    def shown(value: Decimal) -> str:
        if currency:
            return money(value, currency, locale)
        from babel.numbers import format_decimal

        return str(format_decimal(value, locale=locale, decimal_quantization=False))

    def fits(value: Decimal | None) -> bool:
        return value is not None and (unit is None or places(value) <= unit)

    own, alt = _read(text, dec, grp), _read(text, alt_dec, alt_grp)
    if own is not None:
        if alt is not None and alt != own and fits(own) and fits(alt):
            raise AmountError(
                f"{text} could mean {shown(own)} or {shown(alt)}: type "
                f"{_plain(own, dec, unit)} or {_plain(alt, dec, unit)}"
            )
        if not fits(own):
            raise AmountError(_too_precise(text, currency or "this field", unit or 0, own))
        if currency and own <= 0:
            raise AmountError(f"{text} is not an amount above zero")
        return own
    lenient = _read(text.replace(grp, ""), dec, grp) if grp else None
    readings = list(dict.fromkeys(v for v in (alt, lenient) if v is not None and fits(v)))
    if readings:
        said = " or ".join(shown(v) for v in readings)
        typed = " or ".join(_plain(v, dec, unit) for v in readings)
        raise AmountError(f"{text} could mean {said}: type {typed}")
    raise AmountError(f"{text[:40]!r} is not a number")


def _plain(value: Decimal, dec: str, unit: int | None) -> str:
    """A value with no group separator and the locale's decimal symbol: unambiguous to type."""
    if unit is not None and places(value) <= unit:
        value = value.quantize(Decimal(1).scaleb(-unit))
    return f"{value:f}".replace(".", dec)
