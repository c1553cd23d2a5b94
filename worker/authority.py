"""Approval authority, as the one decision path applies it: which band a request's amount falls
in (by the bands fixed on the run when it paused) and whether every approver holds one of that
band's groups. Groups come with the decision from sources that authenticate the person (the API,
the web inbox); sources that only name them (the inbox CLI, a webhook, a polled inbox) get them
from the one directory there is, the API keys by name (``KeyStore.groups_of``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from core import settings
from core.authority import Band, Bands
from core.identity import identity_key
from inbox.hitl import HitlRequest
from worker.refusals import Refusal, Refused


def bands_for(workflow: str) -> list[dict[str, Any]] | None:
    """What a pausing run fixes: its workflow's bands from ``AUTHORITY_FILE`` (None: no matrix
    for it, so anyone with the reviewer role approves)."""
    matrix = settings.AUTHORITY_FILE.get()
    bands = (matrix or {}).get(workflow)
    return None if bands is None else bands.to_json()


def amount_of(flow: Any, request: HitlRequest) -> Decimal | None:
    """The workflow's reading of the amount (``amount(request)``, optional); None: unknown."""
    read = getattr(flow, "amount", None)
    return None if read is None else read(request)


def band_of(stored: list[dict[str, Any]], amount: Decimal | None) -> Band:
    bands = Bands.from_json(stored)
    return bands.bands[bands.band(amount)]


def needs(stored: list[dict[str, Any]] | None, amount: Decimal | None) -> str | None:
    """How the request shows who may approve it (``one of finance``)."""
    return None if stored is None else band_of(stored, amount).needs()


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
    amount: Decimal | None,
    approvers: list[str],
    groups: Mapping[str, frozenset[str]] | None,
    directory: Callable[[str], frozenset[str]],
) -> Band | Refused:
    """The band the request (as it will run) falls in, if every approver holds one of its
    groups; else the refusal naming who lacks it and what is needed."""
    band = band_of(stored, amount)
    known = {identity_key(k): v for k, v in (groups or {}).items()}
    for name in approvers:
        held = known.get(identity_key(name)) if groups is not None else directory(name)
        if not set(held or ()) & set(band.groups):
            shown = f"{amount:,.2f}" if amount is not None else "an unreadable amount"
            return Refused(
                Refusal.AUTHORITY,
                f"approving this request ({shown}) needs {band.needs()}; "
                f"{name} is in {', '.join(sorted(held or ())) or 'no group'}",
            )
    return band
