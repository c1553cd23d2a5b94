"""Approval authority, as the one decision path applies it: which band a request's amount falls
in (by the bands fixed on the run when it paused) and whether every approver holds one of that
band's groups. Groups come with the decision from sources that authenticate the person (the API,
the web inbox); sources that only name them (the inbox CLI, a webhook, a polled inbox) get them
from the one directory there is, the API keys by name (``KeyStore.groups_of``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from core import settings
from core.authority import Band, Bands, needs_phrase
from core.hitl import HitlRequest
from core.identity import identity_key
from worker.refusals import Refusal, Refused

if TYPE_CHECKING:  # the workflow module imports Charge from here
    from worker.workflows import Workflow


def bands_for(workflow: str) -> list[dict[str, Any]] | None:
    """What a pausing run fixes: its workflow's bands from ``AUTHORITY_FILE`` (None: no matrix
    for it, so anyone with the reviewer role approves)."""
    matrix = settings.AUTHORITY_FILE.get()
    bands = (matrix or {}).get(workflow)
    return None if bands is None else bands.to_json()


def amount_of(flow: Workflow, request: HitlRequest) -> Decimal | None:
    """The workflow's reading of the amount (``amount(request)``); None: unknown."""
    return flow.amount(request)


@dataclass(frozen=True)
class Charge:
    """What approving one action commits: ``amount`` (None: unreadable, so the highest band)
    counted on ``subject``, the business object it moves (an order, a cost center; None: the
    action is counted on its own)."""

    subject: str | None
    amount: Decimal | None


def charges_of(flow: Workflow, request: HitlRequest) -> list[Charge]:
    """One :class:`Charge` per action, by the workflow's ``charges(request)`` (the default,
    ``WorkflowBase.charges``, charges the request's amount to each action on its own)."""
    return list(flow.charges(request))


def cumulative(charges: Iterable[Charge], before: Mapping[str, Decimal]) -> Decimal | None:
    """The largest amount counted on one subject: what was approved for it ``before`` and
    the ``charges`` together (each charge without a subject alone); None if one is unreadable."""
    sums: dict[str, Decimal] = {}
    for i, c in enumerate(charges):
        if c.amount is None:
            return None
        key = c.subject if c.subject is not None else f"\0{i}"
        start = before.get(c.subject, Decimal(0)) if c.subject is not None else Decimal(0)
        sums[key] = sums.get(key, start) + c.amount
    return max(sums.values(), default=Decimal(0))


def request_amount(flow: Any, request: HitlRequest) -> Decimal | None:
    """The amount a request's band is read from, wherever it is shown or judged: the largest
    amount it moves on one object (its charges to one order together)."""
    return cumulative(charges_of(flow, request), {})


def band_quorum(stored: list[dict[str, Any]] | None, amount: Decimal | None) -> int:
    """The approvers the band of ``amount`` needs (1 without a matrix)."""
    return 1 if stored is None else band_of(stored, amount).quorum


def band_of(stored: list[dict[str, Any]], amount: Decimal | None) -> Band:
    bands = Bands.from_json(stored)
    return bands.bands[bands.band(amount)]


def needs(stored: list[dict[str, Any]] | None, amount: Decimal | None, quorum: int) -> str | None:
    """How every view shows who may approve the request (``one of finance``, ``2 approvers,
    each one of finance``): the band's groups with the quorum the decision path counts (the
    band's or the policy's, whichever is higher; without a matrix, ``2 approvers`` or None)."""
    if stored is None:
        return needs_phrase((), quorum)
    band = band_of(stored, amount)
    return needs_phrase(band.groups, max(band.quorum, quorum))


def groups_needed(stored: list[dict[str, Any]] | None, amount: Decimal | None) -> str | None:
    """The groups that may approve the request as proposed, kept on the waiting run for the
    "waiting on me" view: ``|finance|audit|`` (None: no matrix, any reviewer). A group holding
    ``|`` cannot be told apart in that text and is left out of it (the view only; the decision
    path judges every group)."""
    if stored is None:
        return None
    kept = [g for g in band_of(stored, amount).groups if "|" not in g]
    return "|" + "|".join(kept) + "|"


def check(
    stored: list[dict[str, Any]],
    amounts: Mapping[str, Decimal | None],
    groups: Mapping[str, frozenset[str]] | None,
    directory: Callable[[str], frozenset[str]],
    request_amount: Decimal | None = None,
) -> Band | Refused:
    """The highest band the approvers' ``amounts`` (each one's cumulative amount) fall in, if
    every approver holds one of the groups of their own band; else the refusal naming who
    lacks it and what is needed. ``request_amount``: the request's own, as shown to them."""
    judged = [band_of(stored, request_amount)]
    known = {identity_key(k): v for k, v in (groups or {}).items()}
    for name, amount in amounts.items():
        band = band_of(stored, amount)
        judged.append(band)
        held = known.get(identity_key(name)) if groups is not None else directory(name)
        if not set(held or ()) & set(band.groups):
            shown = f"{amount:,.2f}" if amount is not None else "an unreadable amount"
            if amount is not None and request_amount is not None and amount > request_amount:
                shown = f"{shown}, with what {name} approved before for the same object"
            return Refused(
                Refusal.AUTHORITY,
                f"approving this request ({shown}) needs {band.needs()}; "
                f"{name} is in {', '.join(sorted(held or ())) or 'no group'}",
            )
    return max(judged, key=lambda b: (b.quorum, b.up_to is None, b.up_to or 0))
