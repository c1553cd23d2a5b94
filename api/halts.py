"""The stop button over HTTP (``worker.halting``): ``GET /halts`` for operators, ``POST /halts``
and ``POST /halts/lift`` for the admin role. Who halted is the authenticated principal, never a
field of the body."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field

from api.auth import Admin, Operator
from api.errors import ApiError
from api.models import ErrorBody, Strict
from core.errors import UserError
from store import halts
from worker.halting import halt, unhalt

router = APIRouter(tags=["halts"])
ERRORS: dict[int | str, dict[str, Any]] = {c: {"model": ErrorBody} for c in (401, 403, 409, 422)}


class Scope(Strict):
    workflow: str | None = Field(None, max_length=200, description="halt one workflow")
    tool: str | None = Field(None, max_length=200, description="halt one tool, everywhere")
    all: bool = Field(False, description="halt everything")
    reason: str = Field(min_length=1, max_length=500, description="why; audited")


def _view(h: halts.Halt) -> dict[str, Any]:
    return {"scope": h.scope, "reason": h.reason, "by": h.actor, "at": h.at}


@router.get("/halts", responses=ERRORS)
def list_halts(request: Request, _: Operator) -> dict[str, Any]:
    """What is halted now, by whom and why."""
    return {"halts": [_view(h) for h in request.app.state.runner.store.tables.halts().current()]}


@router.post("/halts", status_code=201, responses=ERRORS)
def make_halt(body: Scope, request: Request, who: Admin) -> dict[str, Any]:
    """Halt a workflow, a tool or everything: no new runs start, decisions are refused
    ``halted``, runs mid-resume stop before their next side effect."""
    store = request.app.state.runner.store
    try:
        made = halt(
            store,
            f"api:{who.name}",
            body.reason,
            workflow=body.workflow,
            tool=body.tool,
            everything=body.all,
        )
    except UserError as exc:
        raise ApiError(422, "invalid", str(exc)) from None
    return _view(made)


@router.post("/halts/lift", responses=ERRORS)
def lift_halt(body: Scope, request: Request, who: Admin) -> dict[str, Any]:
    """Lift a halt; the runs it stopped go back to the sweep, which resumes them."""
    store = request.app.state.runner.store
    try:
        released = unhalt(
            store,
            f"api:{who.name}",
            body.reason,
            workflow=body.workflow,
            tool=body.tool,
            everything=body.all,
        )
    except UserError as exc:
        code = 409 if "is not halted" in str(exc) else 422
        raise ApiError(code, "not_halted" if code == 409 else "invalid", str(exc)) from None
    return {"released": released}
