"""What an edit would approve, before anything is applied: the page's script asks while the
reviewer types and shows the answer under the fields ("Amount EUR 329.00 → EUR 1.50", or why
"1,50" cannot be read in their locale). It reads the same parser the decision uses and changes
nothing, so the words shown are the amounts the decision would carry."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from api.errors import error_response
from api.pages.forms import preview
from api.pages.questions import tool_forms
from api.pages.request import _visible
from api.pages.session import locale, runner, viewer
from store.states import Status

router = APIRouter()


@router.get("/inbox/requests/{thread_id}/preview")
def preview_edit(thread_id: str, request: Request) -> Response:
    """``{"changes": [...], "errors": [...]}`` for the typed values in the query string."""
    who = viewer(request)
    run = _visible(request, who, thread_id) if who is not None else None
    if who is None or run is None or not who.can_decide:
        return error_response(404, "unknown_run", "there is no request you can decide here")
    if run.status != Status.WAITING or run.request is None:
        return JSONResponse({"changes": [], "errors": []})
    r = runner(request)
    views = r.graphs.views(run.workflow, run.request)
    forms = tool_forms(run.request, r.args_schemas(run.workflow), views, locale(request))
    changes, errors = preview(forms, dict(request.query_params))
    return JSONResponse({"changes": changes, "errors": errors})
