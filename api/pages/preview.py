"""What an edit would approve, before anything is applied: the page's script asks while the
reviewer types and shows the answer under the fields ("Amount EUR 329.00 → EUR 1.50", or why
"1,50" cannot be read in their locale). It reads the same parser the decision uses and changes
nothing, so the words shown are the amounts the decision would carry."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from api.errors import error_response
from api.pages.forms import ActionForm, preview
from api.pages.questions import page_forms
from api.pages.request import _visible
from api.pages.session import locale, runner, viewer
from core.hitl import HitlRequest
from inbox.views import changed_fields
from store.states import Run, Status
from worker.runner import Runner

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
    forms = page_forms(r, run, locale(request))
    changes, errors, edited = preview(forms, dict(request.query_params))
    if edited and not errors:
        changes += _follows(r, run, forms, edited)
    return JSONResponse({"changes": changes, "errors": errors})


def _follows(
    r: Runner, run: Run, forms: list[ActionForm], edited: dict[int, dict[str, Any]]
) -> list[str]:
    """What changes with the typed values: arguments derived from them (a new supplier's
    price), facts that follow (the total) and the approvals the request then needs."""
    flow = r.graphs.workflow(run.workflow)
    actions = list(run.asked.actions)
    out = []
    for form in forms:
        if form.index not in edited or form.view is None:
            continue
        args = edited[form.index]
        args = flow.derive(form.name, args)
        actions[form.index] = replace(actions[form.index], args=args)
        after = r.graphs.views(run.workflow, HitlRequest((actions[form.index],)))
        typed = {f.label for f in form.fields if not f.locked}
        out += [
            f"{label} {old} → {new}"
            for label, old, new in changed_fields(form.view, after[0])
            if label not in typed
        ]
    was = r.needs(run) or "one approver"
    as_edited = replace(run.asked, actions=tuple(actions))
    now = r.needs(run, as_edited) or "one approver"
    if now != was:  # the band and the quorum of the new total
        out.append(f"it then needs {now} (now {was})")
    return out
