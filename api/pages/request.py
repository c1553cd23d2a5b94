"""A request's page and the decision posted from it.

The page shows what the reviewer decides on (each proposed action's arguments, the conversation,
the deadline, who already approved, the run's history). The decision goes through the one
decision path (``worker.decisions``) like the API's, with the interrupt id and digest the page
was built from, so a page that went stale cannot approve something else: it is refused and the
page lists what changed.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.responses import RedirectResponse, Response

from api.errors import REFUSAL_STATUS
from api.models import RUN_ID
from api.pages.forms import ActionForm, changes, mark_refusal, read_decisions, seen
from api.pages.questions import page_forms, placed, questions, rederive
from api.pages.queue import ended, principals_of
from api.pages.session import (
    Posted,
    Viewer,
    csrf_ok,
    forbidden_csrf,
    locale,
    render,
    runner,
    to_login,
    viewer,
    zoned,
)
from api.pages.story import conversation_words, reference, side_effect_words, story
from api.serverless import resume_within_budget
from api.throttle import credential, throttle
from core import settings
from core.faults import fault
from core.hitl import ActionRequest, HitlRequest
from inbox.views import ActionView, ViewField, as_decided, changed_fields
from store.approvals import Approval
from store.history import HistoryEntry
from store.queue import QueueFilter
from store.states import Event, Run, Status
from worker.decisions import Decision, Pending, Result, Source
from worker.refusals import Refusal, Refused

router = APIRouter()
_ID = re.compile(RUN_ID)


def _visible(request: Request, who: Viewer, thread_id: str) -> Run | None:
    run = runner(request).runs.get(thread_id) if _ID.fullmatch(thread_id) else None
    if run is not None and not who.sees_all and not who.is_requester_of(run.requested_by):
        return None  # someone else's run looks like no run
    return run


def _not_found(request: Request, who: Viewer, thread_id: str) -> Response:
    message = f"There is no request {thread_id[:80]!r} you can see."
    return render(request, "error.html", {"who": who, "message": message}, 404)


def _proposal(
    so_far: list[Approval], actions: list[ActionRequest], views: list[ActionView], r: Any, run: Run
) -> dict[str, Any] | None:
    """The quorum's standing proposal when it changes what the agent proposed: whose, and the
    diff against the agent's proposal, in words."""
    if not so_far or all(d.get("type") == "approve" for d in so_far[0].decisions):
        return None
    lines = []
    for i, d in enumerate(so_far[0].decisions):
        if d.get("type") == "edit" and i < len(actions):
            edited = d.get("edited_action") or {}
            after = ActionRequest(actions[i].name, dict(edited.get("args") or {}))
            new_view = r.graphs.views(run.workflow, HitlRequest((after,)))[0]
            for label, old, new in changed_fields(views[i], new_view):
                lines.append({"label": label, "old": old, "new": new})
    standing = as_decided(run.asked, {"decisions": so_far[0].decisions})
    return {
        "by": so_far[0].reviewer,
        "supporters": [a.reviewer for a in so_far],
        "lines": lines,
        "needs": r.needs(run, standing) or "one approver",  # the band it now falls in
        "fingerprint": so_far[0].fingerprint,
    }


def _effects(events: list[HistoryEntry]) -> list[dict[str, str]]:
    """What the run carried out, in words, each with its downstream reference."""
    out = []
    for e in events:
        if e.reason == "side effect" and isinstance(e.detail, dict):
            result = e.detail.get("result")
            result = result if isinstance(result, dict) else {}
            words = side_effect_words(str(e.detail.get("tool")), result)
            out.append({"text": words[:1].upper() + words[1:], "ref": reference(result)})
    return out


def _context(
    request: Request, who: Viewer, run: Run, forms: list[ActionForm] | None = None
) -> dict[str, Any]:
    r = runner(request)
    reads = r.store.tables.reads()
    copy = reads.inbox_copy(run.interrupt_id) if run.interrupt_id else None
    actions = list(run.asked.actions)
    views = r.graphs.views(run.workflow, run.asked) if actions else []
    expired = run.expires_at is not None and run.expires_at <= time.time()
    open_ = run.status == Status.WAITING and run.request is not None and not expired
    if forms is None and open_ and who.can_decide:
        forms = page_forms(r, run, locale(request), views)
    so_far = (
        r.store.tables.approvals().list(run.thread_id, run.interrupt_id) if run.interrupt_id else []
    )
    events = reads.history(run.thread_id)

    def describe(action: ActionRequest) -> ActionView:
        return r.graphs.views(run.workflow, HitlRequest((action,)))[0]

    decided = as_decided(run.asked, run.decision) if not open_ else run.asked
    after = r.graphs.views(run.workflow, decided) if actions and decided != run.asked else views
    effects = [e.detail for e in events if e.reason == "side effect" and e.detail]
    title = "; ".join(v.summary for v in after) or (copy.title if copy else None)
    if not open_:
        views = _as_proposed(views, events)
    return {
        "who": who,
        "run": run,
        "title": title or f"{run.workflow} request",
        "description": copy.description if copy else "",
        "actions": actions,
        "views": views,
        "shown": [v for a, v in zip(actions, views, strict=False) if a.question is None],
        "expired": expired,
        "conversation": conversation_words(copy.conversation if copy else [], describe),
        "approvers": reads.approvers(run.thread_id, run.interrupt_id) if run.interrupt_id else [],
        "proposal": _proposal(so_far, actions, views, r, run),
        "supported": any(who.is_requester_of(a.reviewer) for a in so_far),  # my own approval
        "counter": bool(so_far),
        "history": story(events, actions, describe) if who.sees_all else [],
        "effects": _effects(events),
        "ended": None if open_ or run.status == Status.WAITING else ended(run, effects),
        "decided_lines": [
            {"label": label, "old": old, "new": new}
            for before, now in zip(views, after, strict=False)
            for label, old, new in changed_fields(before, now)
        ],
        "forms": forms if open_ and who.can_decide else None,
        "seen": seen(run.asked),
        "refresh": run.status.active,
        "refresh_url": f"/inbox/requests/{run.thread_id}",
        "questions": questions(r, run) if open_ else [],
        "needs": r.needs(run) if open_ else None,
        "acting_for": _acting_for(request, who) if open_ and who.can_decide else [],
    }


def _as_proposed(views: list[ActionView], events: list[HistoryEntry]) -> list[ActionView]:
    """A decided run's proposal with the facts beside it as they were when it was proposed
    (what was refunded so far then), kept with the pause; today's where none was kept."""
    paused = [e.detail for e in events if e.reason == Event.PAUSED and e.detail]
    kept = paused[-1].get("action_requests") if paused else None
    out = []
    for i, view in enumerate(views):
        seen = kept[i].get("seen") if kept and i < len(kept) and isinstance(kept[i], dict) else None
        if isinstance(seen, dict) and isinstance(seen.get("context"), list):
            facts = tuple(ViewField(str(label), str(text)) for label, text in seen["context"])
            view = dataclasses.replace(view, context=facts)
        out.append(view)
    return out


def _acting_for(request: Request, who: Viewer) -> list[str]:
    """Whom the reviewer may decide for now (people who delegated to them), by name."""
    lent = runner(request).store.tables.delegations().active_to(who.key)
    return list(dict.fromkeys(x.delegator for x in lent))


def _next_request(request: Request, who: Viewer, thread_id: str) -> str | None:
    """The most urgent other request waiting on this reviewer, for "Next request"."""
    where = QueueFilter(waiting_on_me=True, principals=principals_of(request, who))
    run_by = runner(request)
    rows = run_by.store.tables.reads().queue_page(who.key, where, None, 2, run_by.clock())
    other = next((row for row in rows if row.thread_id != thread_id), None)
    return f"/inbox/requests/{other.thread_id}" if other else None


@router.get("/inbox/requests/{ref}")
def request_page(ref: str, request: Request) -> Response:
    """A request by thread id, or by the inbox's interrupt id (the links notifications carry),
    which redirects to its thread."""
    who = viewer(request)
    if who is None:
        return to_login(request)
    run = _visible(request, who, ref)
    if run is None:
        thread_id = runner(request).store.tables.reads().thread_of_interrupt(ref)
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
            "changes": changes(posted.get("seen", ""), run.asked),
        }
    if result.reason in (Refusal.DECIDED, Refusal.NOT_WAITING):
        said = f"Refused: {result.message[:1].upper()}{result.message[1:]}."
        return {"kind": "refused", "message": zoned(said, result.details)}
    if result.reason == Refusal.EXPIRED:
        return {"kind": "refused", "message": "Refused: the request expired before your decision."}
    if result.reason == Refusal.AUTHORITY:
        return {"kind": "refused", "message": f"Refused: you lack the authority: {result.message}."}
    if result.reason == Refusal.DUTIES and posted.get("on_behalf_of"):
        return {"kind": "refused", "message": f"Refused by separation of duties: {result.message}."}
    if result.reason == Refusal.DELEGATION:
        return {"kind": "refused", "message": f"Refused: {result.message}."}
    if result.reason == Refusal.DUTIES:
        return {
            "kind": "refused",
            "message": "Refused by separation of duties: you requested this run, so someone "
            "else must approve it.",
        }
    if result.reason == Refusal.INVALID:
        said = re.sub(r"^\w+: ", "", result.message.removeprefix("invalid decision: "))
        return {"kind": "invalid", "message": "Refused, nothing was decided: " + said}
    return {"kind": "refused", "message": f"Refused: {result.message}"}


def reviewer_post(
    request: Request, thread_id: str, posted: dict[str, str], cannot: str | None = None
) -> tuple[Viewer, Run] | Response:
    """Who posts a decision or an answer, and the run it is for; else the page that says why
    not (sign in, CSRF, no such run for them, not a reviewer here). Both count toward
    ``RATE_LIMIT_DECISIONS`` (429 past it), refused attempts too."""
    who = viewer(request)
    if who is None:
        return to_login(request)
    throttle(request, "decisions", settings.RATE_LIMIT_DECISIONS, credential(who.name))
    if not csrf_ok(posted, who.csrf):
        return forbidden_csrf(request, who)
    run = _visible(request, who, thread_id)
    if run is None:
        return _not_found(request, who, thread_id)
    if not who.can_decide:
        message = cannot or "You cannot decide here: " + (
            "decisions are made in Vigilator." if who.has("reviewer") else "it needs a reviewer."
        )
        return render(request, "error.html", {"who": who, "message": message}, 403)
    return who, run


@router.post("/inbox/requests/{thread_id}/decide")
def decide(
    thread_id: str, request: Request, background: BackgroundTasks, posted: Posted
) -> Response:
    """A plain ``def``: a serverless decision waits up to the resume budget, in the thread pool;
    otherwise the resume is a sync background task, which Starlette also runs there."""
    gate = reviewer_post(request, thread_id, posted)
    if isinstance(gate, Response):
        return gate
    who, run = gate
    r = runner(request)
    interrupt_id, digest = posted.get("interrupt_id", ""), posted.get("digest", "")
    fresh = run.status == Status.WAITING and (interrupt_id, digest) == (
        run.interrupt_id,
        run.request_digest,
    )
    forms = None
    decisions: list[dict[str, Any] | None] | None
    if fresh and posted.get("take") == "proposal":
        so_far = r.store.tables.approvals().list(thread_id, interrupt_id)
        if not so_far or so_far[0].fingerprint != posted.get("proposal", ""):
            context = _context(request, who, run)
            context["outcome"] = {
                "kind": "stale",
                "message": "Refused: the proposal changed since this page was loaded. "
                "Nothing was decided; review it again below.",
            }
            return render(request, "request.html", context, 409)
        decisions = list(so_far[0].decisions)
    elif fresh:
        schemas = r.args_schemas(run.workflow)
        forms = page_forms(r, run, locale(request))
        decisions = placed(run.asked, forms, read_decisions(forms, posted, schemas))
        decisions = None if decisions is None else rederive(r, run, decisions)
        if decisions is None:
            context = _context(request, who, run, forms)
            context["outcome"] = {
                "kind": "invalid",
                "message": "Nothing was decided: fix the marked fields.",
            }
            return render(request, "request.html", context, 422)
    else:
        decisions = []
    assert decisions is not None  # an invalid form was answered above
    decision = Decision.read(
        decisions,
        thread_id=thread_id,
        interrupt_id=interrupt_id,
        approvers=[who.name],
        source=Source.PAGE,
        digest=digest,
        counter=posted.get("counter") == "1",
        groups={who.name: frozenset(who.groups)},
        on_behalf_of=posted.get("on_behalf_of") or None,
    )
    return result_page(request, who, run, r.decide(decision, run=run), posted, background, forms)


def result_page(
    request: Request,
    who: Viewer,
    run: Run,
    result: Result,
    posted: dict[str, str],
    background: BackgroundTasks,
    forms: list[ActionForm] | None = None,
) -> Response:
    """The page after a decision or an answer: refused (why), pending (so far), or applied
    (the run resumes)."""
    r = runner(request)
    thread_id = run.thread_id
    run = r.runs.get(thread_id) or run
    if isinstance(result, Refused):
        context = _context(request, who, run)
        context["outcome"] = {
            **_outcome(request, run, result, posted),
            "reason": result.reason.name.lower(),
            "details": result.details,
        }
        context["refresh"] = False  # the reviewer reads why; a refresh would take it away
        if result.reason == Refusal.INVALID and forms is not None:
            mark_refusal(forms, result.message)
            context["forms"] = forms
        return render(request, "request.html", context, REFUSAL_STATUS[result.reason])
    context = _context(request, who, run)
    if isinstance(result, Pending) and result.questions:
        context["outcome"] = {
            "kind": "pending",
            "message": f"Your answer is recorded: {result.answered} of {result.questions} "
            "answered. The run resumes when every one is.",
        }
        return render(request, "request.html", context, 202)
    context["next_url"] = _next_request(request, who, thread_id)
    if isinstance(result, Pending):
        context["outcome"] = {
            "kind": "pending",
            "message": f"Your approval is recorded: {len(result.approvers)} of {result.quorum} "
            f"approvers ({', '.join(result.approvers)}). The run waits for the others.",
        }
        return render(request, "request.html", context, 202)
    if r.resumer is None:
        # a frozen function never runs a task after its answer: resume now, within the budget
        resume_within_budget(r, result.run)
        context = _context(request, who, r.runs.get(thread_id) or run)
    fault("decide.answer")  # otherwise handed off when claimed: a failure here strands nothing
    context["outcome"] = {
        "kind": "applied",
        "message": "Decision applied: the run is resuming. This page refreshes until it is done.",
    }
    context["refresh"] = True
    return render(request, "request.html", context, 202, background=background)
