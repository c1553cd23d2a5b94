"""The approval authority matrix: which groups may approve a workflow's request, by amount band.

It is configuration (a TOML file named by ``AUTHORITY_FILE``), read and checked when the
setting is read, so a mistake stops a process at start-up with one ``error: AUTHORITY_FILE ...``
line. A run copies its workflow's bands when it pauses (like quorum and separation of duties),
so a later change of the file never changes who may approve a request already waiting::

    [refund]
    bands = [
      { up_to = "500.00", groups = ["support-leads"] },
      { groups = ["finance"] },                 # no up_to: everything above
    ]

    [purchase-order]
    bands = [
      { up_to = "1000.00", groups = ["team-leads"] },
      { groups = ["finance"], quorum = 2 },
    ]

A workflow absent from the file keeps today's rule: anyone with the reviewer role approves.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

MAX_GROUPS = 50
MAX_NAME = 100


class MatrixError(ValueError):
    """What is wrong with the file, in one line (the setting's check prefixes its name)."""


@dataclass(frozen=True)
class Band:
    """Amounts up to ``up_to`` (inclusive; None: no upper bound) need one of ``groups``."""

    up_to: Decimal | None
    groups: tuple[str, ...]
    quorum: int = 1

    def to_json(self) -> dict[str, Any]:
        up_to = None if self.up_to is None else str(self.up_to)
        return {"up_to": up_to, "groups": list(self.groups), "quorum": self.quorum}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Band:
        up_to = raw.get("up_to")
        return cls(
            None if up_to is None else Decimal(up_to),
            tuple(raw["groups"]),
            int(raw.get("quorum") or 1),
        )

    def needs(self) -> str:
        """How a request shows it: ``one of finance, audit``."""
        return needs_phrase(self.groups, self.quorum) or ""


def needs_phrase(groups: Sequence[str], quorum: int) -> str | None:
    """How every view says who may approve a request (the API's ``approval.needs``, the page,
    Slack, e-mail): ``one of finance``, ``2 approvers, each one of finance``, or without a
    matrix ``2 approvers``; None when anyone with the reviewer role approves alone."""
    if not groups:
        return None if quorum <= 1 else f"{quorum} approvers"
    who = f"one of {', '.join(groups)}"
    return who if quorum <= 1 else f"{quorum} approvers, each {who}"


@dataclass(frozen=True)
class Bands:
    """One workflow's bands, lowest first; the last one has no upper bound."""

    bands: tuple[Band, ...]

    def band(self, amount: Decimal | None) -> int:
        """The index of the band ``amount`` falls in; an amount that cannot be read is in the
        highest band (never let an unreadable amount through with less authority)."""
        if amount is None:
            return len(self.bands) - 1
        for i, band in enumerate(self.bands):
            if band.up_to is None or amount <= band.up_to:
                return i
        return len(self.bands) - 1

    def to_json(self) -> list[dict[str, Any]]:
        return [b.to_json() for b in self.bands]

    @classmethod
    def from_json(cls, raw: list[dict[str, Any]]) -> Bands:
        return cls(tuple(Band.from_json(b) for b in raw))


Matrix = dict[str, Bands]


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise MatrixError(f"{where}: a group is a name of 1 to {MAX_NAME} characters")
    return value.strip()


def _band(raw: object, where: str) -> Band:
    if not isinstance(raw, dict):
        raise MatrixError(f'{where}: a band is a table like {{ up_to = "500.00", groups = [...] }}')
    unknown = set(raw) - {"up_to", "groups", "quorum"}
    if unknown:
        raise MatrixError(f"{where}: unknown key {sorted(unknown)[0]!r} (up_to, groups, quorum)")
    groups = raw.get("groups")
    if not isinstance(groups, list) or not groups or len(groups) > MAX_GROUPS:
        raise MatrixError(f"{where}: groups must be a list of 1 to {MAX_GROUPS} names")
    up_to: Decimal | None = None
    if "up_to" in raw:
        try:
            up_to = Decimal(str(raw["up_to"]))
        except InvalidOperation:
            raise MatrixError(f"{where}: up_to {raw['up_to']!r} is not an amount") from None
        if not up_to.is_finite() or up_to < 0:
            raise MatrixError(f"{where}: up_to must be a finite amount of at least 0")
    quorum = raw.get("quorum", 1)
    if not isinstance(quorum, int) or isinstance(quorum, bool) or not 1 <= quorum <= 100:
        raise MatrixError(f"{where}: quorum must be a whole number from 1 to 100")
    return Band(up_to, tuple(dict.fromkeys(_name(g, where) for g in groups)), quorum)


def parse_matrix(text: str) -> Matrix:
    """The matrix in ``text`` (TOML), or :class:`MatrixError` saying what is wrong, in a line."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(f"not valid TOML: {str(exc).splitlines()[0]}") from None
    matrix: Matrix = {}
    for workflow, table in raw.items():
        where = f"[{workflow}]"
        if not isinstance(table, dict) or set(table) != {"bands"}:
            raise MatrixError(f"{where} must hold exactly one key, bands = [ ... ]")
        bands = table["bands"]
        if not isinstance(bands, list) or not bands:
            raise MatrixError(f"{where}: bands must be a non-empty list")
        parsed = [_band(b, f"{where} band {i + 1}") for i, b in enumerate(bands)]
        for i, band in enumerate(parsed[:-1]):
            if band.up_to is None:
                raise MatrixError(f"{where} band {i + 1}: only the last band may omit up_to")
            nxt = parsed[i + 1].up_to
            if nxt is not None and nxt <= band.up_to:
                raise MatrixError(f"{where} band {i + 2}: up_to must rise from band to band")
        if parsed[-1].up_to is not None:
            raise MatrixError(
                f"{where}: the last band must omit up_to (it covers every amount above)"
            )
        matrix[workflow] = Bands(tuple(parsed))
    return matrix


def load_matrix(path: str) -> Matrix:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(1_000_001)
    except OSError as exc:
        raise MatrixError(f"cannot read {path!r}: {exc.strerror}") from None
    if len(text) > 1_000_000:
        raise MatrixError(f"{path!r} is larger than 1 MB")
    return parse_matrix(text)
