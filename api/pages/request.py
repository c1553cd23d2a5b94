"""A request's page and the decision posted from it.

The page shows what the reviewer decides on (each proposed action's arguments, the conversation,
the deadline, who already approved, the run's history). The decision goes through the one
decision path (``worker.decisions``) like the API's, with the interrupt id and digest the page
was built from, so a page that went stale cannot approve something else: it is refused and the
page lists what changed.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.responses import RedirectResponse, Response

from api.errors import REFUSAL_STATUS
from api.models import THREAD_ID
from api.pages.forms import ActionForm, action_forms, changes, read_decisions, seen
from api.pages.session import (
    Posted,
    Viewer,
    csrf_ok,
    forbidden_csrf,
    render,
    runner,
    to_login,
    viewer,
)
from api.serverless import resume_within_budget
from api.throttle import credential, throttle
from core import settings
from inbox.hitl import HitlRequest, conversation_lines
from store.history import history
from store.queue import approvers, inbox_copy, thread_of_interrupt
from store.states import Run, Status
from worker.decisions import Decision, Pending, Source
from worker.refusals import Refusal, Refused

router = APIRouter()
_ID = re.compile(THREAD_ID)


def _visible(request: Request, who: Viewer, thread_id: str) -> Run | None:
    run = runner(request).runs.get(thread_id) if _ID.fullmatch(thread_id) else None
    if run is not None and not who.sees_all and not who.is_requester_of(run.requested_by):
        return None  # someone else's run looks like no run
    return run


def _not_found(request: Request, who: Viewer, thread_id: str) -> Response:
    message = f"There is no request {thread_id[:80]!r} you can see."
    return render(request, "error.html", {"who": who, "message": message}, 404)


def _context(
    request: Request, who: Viewer, run: Run, forms: list[ActionForm] | None = None
) -> dict[str, Any]:
    r = runner(request)
    db = r.store.db
    copy = inbox_copy(db, run.interrupt_id) if run.interrupt_id else None
    waiting = run.status == Status.WAITING and run.request is not None
    if forms is None and waiting and who.can_decide:
        forms = action_forms(run.request or {}, r.args_schemas(run.workflow))
    return {
        "who": who,
        "run": run,
        "title": (copy or {}).get("title") or f"{run.workflow} request",
        "description": (copy or {}).get("description") or "",
        "actions": HitlRequest.parse(run.request).actions,
        "conversation": conversation_lines((copy or {}).get("conversation") or [], 2000),
        "approvers": approvers(db, run.thread_id, run.interrupt_id) if run.interrupt_id else [],
        "history": history(db, run.thread_id) if who.sees_all else [],
        "forms": forms if waiting and who.can_decide else None,
        "seen": seen(run.request or {}),
        "refresh": run.status.active,
        "refresh_url": f"/inbox/requests/{run.thread_id}",
    }


@router.get("/inbox/requests/{ref}")
def request_page(ref: str, request: Request) -> Response:
    """A request by thread id, or by the inbox's interrupt id (the links notifications carry),
    which redirects to its thread."""
    who = viewer(request)
    if who is None:
        return to_login(request)
    run = _visible(request, who, ref)
    if run is None:
        thread_id = thread_of_interrupt(runner(request).store.db, ref)
        if thread_id is not None and _visible(request, who, thread_id) is not None:
            return RedirectResponse(f"/inbox/requests/{thread_id}", status_code=303)
        return _not_found(request, who, ref)
    return render(request, "request.html", _context(request, who, run))


def _outcome(request: Request, run: Run, result: Refused, posted: dict[str, str]) -> dict:
    """The words for a refused decision: why, and for a stale page what changed."""
    if result.reason in (Refusal.STALE, Refusal.OTHER_INTERRUPT) and run.status == Status.WAITING:
        return {
            "kind": "stale",
            "message": "Refused: the request changed since this page was loaded. "
            "Nothing was decided; review it again below.",
            "changes": changes(posted.get("seen", ""), run.request),
        }
    if result.reason in (Refusal.DECIDED, Refusal.NOT_WAITING):
        return {
            "kind": "refused",
            "message": f"Refused: {result.message}; the run is {run.status}.",
        }
    if result.reason == Refusal.EXPIRED:
        return {"kind": "refused", "message": "Refused: the request expired before your decision."}
    if result.reason == Refusal.DUTIES:
        return {
            "kind": "refused",
            "message": "Refused by separation of duties: you requested this run, so someone "
            "else must approve it.",
        }
    return {"kind": "refused", "message": f"Refused: {result.message}"}


@router.post("/inbox/requests/{thread_id}/decide")
def decide(
    thread_id: str, request: Request, background: BackgroundTasks, posted: Posted
) -> Response:
    """A plain ``def``: a serverless decision waits up to the resume budget, in the thread pool;
    otherwise the resume is a sync background task, which Starlette also runs there."""
    who = viewer(request)
    if who is None:
        return to_login(request)
    if not csrf_ok(posted, who.csrf):
        return forbidden_csrf(request, who)
    run = _visible(request, who, thread_id)
    if run is None:
        return _not_found(request, who, thread_id)
    if not who.can_decide:
        message = "You cannot decide here: " + (
            "decisions are made in Vigilator." if who.has("reviewer") else "it needs a reviewer."
        )
        return render(request, "error.html", {"who": who, "message": message}, 403)
    throttle(request, "decisions", settings.RATE_LIMIT_DECISIONS, credential(who.via, who.name))
    r = runner(request)
    interrupt_id, digest = posted.get("interrupt_id", ""), posted.get("digest", "")
    fresh = run.status == Status.WAITING and (interrupt_id, digest) == (
        run.interrupt_id,
        run.request_digest,
    )
    forms = None
    if fresh:
        schemas = r.args_schemas(run.workflow)
        forms = action_forms(run.request or {}, schemas)
        decisions = read_decisions(forms, posted, schemas)
        if decisions is None:
            context = _context(request, who, run, forms)
            context["outcome"] = {
                "kind": "invalid",
                "message": "Nothing was decided: fix the marked fields.",
            }
            return render(request, "request.html", context, 422)
    else:
        decisions = []
    decision = Decision(
        thread_id=thread_id,
        interrupt_id=interrupt_id,
        decisions=decisions,
        approvers=[who.name],
        source=Source.PAGE,
        digest=digest,
    )
    result = r.decide(decision)
    run = r.runs.get(thread_id) or run
    if isinstance(result, Refused):
        context = _context(request, who, run)
        context["outcome"] = {
            **_outcome(request, run, result, posted),
            "reason": result.reason.name.lower(),
        }
        if result.reason == Refusal.INVALID and forms is not None:
            context["forms"] = forms
        return render(request, "request.html", context, REFUSAL_STATUS[result.reason])
    context = _context(request, who, run)
    if isinstance(result, Pending):
        context["outcome"] = {
            "kind": "pending",
            "message": f"Your approval is recorded: {len(result.approvers)} of {result.quorum} "
            f"approvers ({', '.join(result.approvers)}). The run waits for the others.",
        }
        return render(request, "request.html", context, 202)
    if settings.serverless():
        # a frozen function never runs a task after its answer: resume now, within the budget
        resume_within_budget(r, result.run)
        context = _context(request, who, r.runs.get(thread_id) or run)
    else:
        background.add_task(r.resume_claimed, result.run)
    context["outcome"] = {
        "kind": "applied",
        "message": "Decision applied: the run is resuming. This page refreshes until it is done.",
    }
    context["refresh"] = True
    return render(request, "request.html", context, 202, background=background)
