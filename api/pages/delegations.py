"""The delegation page: a reviewer lends their authority to another person until a date (out of
office), sees what runs from and to them, and revokes; the rules are ``worker.delegation``'s,
the same as ``POST /me/delegations``. Forms carry the session's CSRF token like every other.
"""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from api.pages.session import Posted, Viewer, csrf_ok, forbidden_csrf, render, runner, to_login
from api.pages.session import viewer as signed_in
from store.delegations import Delegations
from worker import delegation

router = APIRouter()
LOCAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d)?")  # a datetime-local value


def _store(request: Request) -> Delegations:
    r = runner(request)
    return r.store.tables.delegations(r.clock)


def _page(
    request: Request, who: Viewer, status: int = 200, error: str | None = None, **form: str
) -> Response:
    current = _store(request).current(who.key)
    context = {
        "who": who,
        "given": [x for x in current if x.delegator_key == who.key],
        "received": [x for x in current if x.delegate_key == who.key],
        "error": error,
        "form": form,
        "max_days": delegation.MAX_DAYS,
    }
    return render(request, "delegations.html", context, status)


def _gate(request: Request, posted: dict[str, str] | None = None) -> Viewer | Response:
    who = signed_in(request)
    if who is None:
        return to_login(request)
    if posted is not None and not csrf_ok(posted, who.csrf):
        return forbidden_csrf(request, who)
    if not who.has("reviewer"):
        message = "Delegating authority needs the reviewer role."
        return render(request, "error.html", {"who": who, "message": message}, 403)
    return who


@router.get("/inbox/delegations")
def page(request: Request) -> Response:
    who = _gate(request)
    return who if isinstance(who, Response) else _page(request, who)


@router.post("/inbox/delegations")
def create(request: Request, posted: Posted) -> Response:
    """The form's end is a date and time in UTC (``datetime-local``), or ISO 8601 with a zone."""
    who = _gate(request, posted)
    if isinstance(who, Response):
        return who
    delegate, ends = posted.get("delegate", "")[:200], posted.get("ends_at", "")[:40]
    zoned = ends + "Z" if LOCAL.fullmatch(ends) else ends  # the form's field is UTC
    try:
        delegation.grant(_store(request), who.name, frozenset(who.groups), delegate, zoned, who.via)
    except delegation.DelegationError as exc:
        return _page(request, who, exc.status, str(exc), delegate=delegate, ends_at=ends)
    return RedirectResponse("/inbox/delegations", status_code=303)


@router.post("/inbox/delegations/{delegation_id}/revoke")
def revoke(delegation_id: str, request: Request, posted: Posted) -> Response:
    who = _gate(request, posted)
    if isinstance(who, Response):
        return who
    try:
        delegation.revoke(_store(request), delegation_id, who.name, who.has("admin"))
    except delegation.DelegationError as exc:
        return _page(request, who, exc.status, str(exc))
    return RedirectResponse("/inbox/delegations", status_code=303)
