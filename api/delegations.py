"""Delegation over HTTP: a reviewer lends their authority to another person for a period (out of
office), lists what runs from or to them, and revokes. The rules are ``worker.delegation``'s;
the delegate then decides "for" the delegator by naming them (``on_behalf_of``) in a decision.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field

from api.auth import Reviewer
from api.errors import ApiError
from api.models import ErrorBody, Strict
from core.identity import identity_key
from store.delegations import Delegations
from store.keys import Role
from worker import delegation
from worker.runner import Runner

router = APIRouter(tags=["delegation"])
ERRORS: dict[int | str, dict[str, Any]] = {
    c: {"model": ErrorBody} for c in (401, 403, 404, 409, 422, 429)
}


class NewDelegation(Strict):
    delegate: str = Field(min_length=1, max_length=200, description="who may act for you")
    ends_at: str = Field(
        min_length=1,
        max_length=40,
        description="when it ends: ISO 8601 with a time zone, in the future, at most 90 days",
        examples=["2026-12-24T18:00:00Z"],
    )


def _store(request: Request) -> Delegations:
    runner: Runner = request.app.state.runner
    return runner.store.tables.delegations(runner.clock)


@router.post("/me/delegations", status_code=201, responses=ERRORS)
def create_delegation(body: NewDelegation, request: Request, who: Reviewer) -> dict[str, Any]:
    """Lend your authority (your groups, as your credential holds them now) to ``delegate``
    until ``ends_at``. They act for you by naming you (``on_behalf_of``) in a decision; they
    never approve a request either of you made, and cannot pass it on."""
    try:
        made = delegation.grant(
            _store(request), who.name, who.groups, body.delegate, body.ends_at, who.via
        )
    except delegation.DelegationError as exc:
        raise ApiError(exc.status, exc.code, str(exc)) from None
    return made.view()


@router.get("/me/delegations", responses=ERRORS)
def list_delegations(request: Request, who: Reviewer) -> dict[str, Any]:
    """Delegations from you and to you that have not ended or been revoked."""
    mine = _store(request).current(identity_key(who.name))
    return {"delegations": [x.view() for x in mine]}


@router.post("/me/delegations/{delegation_id}/revoke", responses=ERRORS)
def revoke_delegation(delegation_id: str, request: Request, who: Reviewer) -> dict[str, Any]:
    """End a delegation now (its delegator, its delegate, or an admin)."""
    try:
        ended = delegation.revoke(_store(request), delegation_id, who.name, Role.ADMIN in who.roles)
    except delegation.DelegationError as exc:
        raise ApiError(exc.status, exc.code, str(exc)) from None
    return ended.view()
