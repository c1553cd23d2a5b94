"""E-mail links as a place to decide: a confirmation page, then one decision path.

``GET /email/decide?token=...`` is what a link in an approval e-mail opens. It only reads: mail
scanners and link previews open links, so it shows what the reviewer is about to do (the
business summary, the deadline, who they decide as) and a form. Only that form's
``POST /email/decide`` decides: it takes the reviewer's link once (``store/mail.py``: of two
uses at once, one), then builds a ``Decision(source=Source.EMAIL, digest=...)`` for
``runner.decide``, which applies every rule as for any source.

The token authenticates (``ops/mail.py``: signed, bound to the key, reviewer, request, digest
and action, expiring with the request); no bearer credential or cookie is involved, so these two
routes are the only ones ``AuthFirst`` lets through for it, and the POST carries the token in
its body (a forged form without it is refused). The token travels in the query string or the
body, never the path, so the access log never holds one; answers are ``no-store``, never
framed, and send no referrer. A refusal is a 4xx in the one error shape (an HTML page with the
same code and message to a browser) and changes no table.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from api.errors import error_body, refused
from api.pages.session import Posted, render, runner
from api.serverless import resume_within_budget
from api.throttle import credential, throttle
from core import settings
from core.faults import fault
from core.hitl_decisions import Approve, Reject
from core.identity import identity_key
from core.settings.channels import email_on
from ops.mail import PATH, Link, LinkRefused, read
from ops.notify import inbox_link, views_of
from store.keys import Key
from store.mail import Use
from store.states import Run, Status
from worker.ballot import Decision, Pending, Source
from worker.refusals import Refused
from worker.runner import Runner

router = APIRouter(tags=["channels"])
MAX_REASON = 500
HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Robots-Tag": "noindex",
}
VERB = {"approve": "Approve", "reject": "Reject"}


def _browser(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def _refusal(
    request: Request, status: int, code: str, message: str, details: dict | None = None
) -> Response:
    if _browser(request):
        error = error_body(code, message, details)["error"]
        return render(request, "mail.html", {"error": error}, status, headers=HEADERS)
    return JSONResponse(error_body(code, message, details), status_code=status, headers=HEADERS)


def _checked(r: Runner, token: str) -> tuple[Link, Key]:
    """The link and the live reviewer key it was sent for, or :class:`LinkRefused`."""
    if not email_on():
        raise LinkRefused(404, "not_found", "e-mail is not configured here")
    link = read(token, r.clock())
    key = r.store.tables.keys().get(link.key_id)
    if key is None or not key.reviews or identity_key(key.name) != identity_key(link.reviewer):
        raise LinkRefused(  # a revoked credential, as every channel answers it
            401, "unauthorized", "the key this link was sent for is revoked or may no longer decide"
        )
    return link, key


def _used(r: Runner, link: Link) -> None:
    use = r.store.tables.email_links().used(link.interrupt_id, identity_key(link.reviewer))
    if use is not None:
        raise LinkRefused(
            409, "used", f"your links for this request were already used (to {use.action})"
        )


def _open(r: Runner, link: Link, run: Run | None) -> Run:
    """The run, if the request the link names still waits as the e-mail showed it."""
    _used(r, link)
    if run is None:
        raise LinkRefused(404, "unknown_run", "the run of this request no longer exists")
    if run.status != Status.WAITING or run.interrupt_id != link.interrupt_id:
        raise LinkRefused(
            409, "not_waiting", f"this request is no longer waiting (run {run.status})"
        )
    if run.expires_at is not None and run.expires_at <= r.clock():
        raise LinkRefused(410, "expired", "this request has expired; nothing can be decided")
    if link.digest is not None and link.digest != run.request_digest:
        raise LinkRefused(
            409, "stale", "the request changed since the e-mail was sent: review it again"
        )
    return run


def _what(link: Link, run: Run) -> str:
    if link.action == "reject":
        return "Rejecting ends the request: nothing shown below is carried out."
    if (run.quorum or 1) > 1:
        return (
            f"Approving records your approval; {run.quorum} approvers are needed, and once they "
            "have all approved the run carries out what is shown below."
        )
    return "Approving lets the run carry out what is shown below, at once."


@router.get("/email/decide", response_class=HTMLResponse)
def confirm(request: Request, token: str = "") -> Response:
    """The page a link opens: what the reviewer is about to do, and the button. Reads only."""
    r = runner(request)
    try:
        link, key = _checked(r, token)
        run = _open(r, link, r.runs.get(link.thread_id))
    except LinkRefused as exc:
        return _refusal(request, exc.status, exc.code, exc.message)
    shown = views_of(run, r.graphs.views)
    asked = link.interrupt_id
    summary = "; ".join(v.summary for v in shown) or run.workflow
    context: dict[str, Any] = {
        "who": None,
        "run": run,
        "shown": shown,
        "summary": summary,
        "verb": VERB[link.action],
        "action": link.action,
        "what": _what(link, run),
        "reviewer": key.name,
        "deadline": min(float(link.expires_at), run.expires_at or float(link.expires_at)),
        "approvers": [a.reviewer for a in r.store.tables.approvals().list(run.thread_id, asked)],
        "token": token,
        "post_url": PATH,
        "max_reason": MAX_REASON,
        "inbox_url": inbox_link(run.interrupt_id),
    }
    return render(request, "mail.html", context, 200, headers=HEADERS)


def _done(
    request: Request, status: int, body: dict[str, Any], title: str, kind: str, message: str
) -> Response:
    if not _browser(request):
        return JSONResponse(body, status_code=status, headers=HEADERS)
    done = {"title": title, "kind": kind, "message": message}
    context = {"who": None, "done": done, "inbox_url": inbox_link(body.get("interrupt_id"))}
    return render(request, "mail.html", context, status, headers=HEADERS)


@router.post("/email/decide", response_class=HTMLResponse)
def decide(request: Request, background: BackgroundTasks, posted: Posted) -> Response:
    """The confirmation page's button: the reviewer's links are spent and the decision made,
    or nothing changes and the answer says why."""
    r = runner(request)
    try:
        link, key = _checked(r, posted.get("token", ""))
    except LinkRefused as exc:
        return _refusal(request, exc.status, exc.code, exc.message)
    throttle(request, "decisions", settings.RATE_LIMIT_DECISIONS, credential(key.name))
    now = r.clock()
    use = Use(
        link.interrupt_id,
        identity_key(link.reviewer),
        link.thread_id,
        link.action,
        now,
        float(link.expires_at),
    )
    links = r.store.tables.email_links()
    if not links.take(use):
        prior = links.used(use.interrupt_id, use.reviewer)
        spent = f" (to {prior.action})" if prior else ""
        message = f"your links for this request were already used{spent}"
        return _refusal(request, 409, "used", message)
    run = r.runs.get(link.thread_id)
    count = len(run.asked.actions) if run and run.request else 1
    reason = posted.get("reason", "").strip()[:MAX_REASON] or "rejected through an e-mail link"
    item = Reject(reason) if link.action == "reject" else Approve()
    decision = Decision(
        thread_id=link.thread_id,
        interrupt_id=link.interrupt_id,
        decisions=[item] * max(count, 1),
        approvers=[key.name],
        source=Source.EMAIL,
        digest=link.digest,
        groups={key.name: key.groups},
    )
    try:
        result = r.decide(decision)
    except BaseException:
        links.give_back(use)  # not decided: the link is not spent
        raise
    if isinstance(result, Refused):
        links.give_back(use)
        error = refused(result)
        return _refusal(request, error.status, error.code, error.message, error.details)
    links.forget_expired(now)
    ids = {"thread_id": link.thread_id, "interrupt_id": link.interrupt_id}
    if isinstance(result, Pending):
        so_far = f"{len(result.approvers)} of {result.quorum} approvals"
        message = f"Your approval is recorded ({so_far}: {', '.join(result.approvers)})."
        body = {**result.answer(link.thread_id), "interrupt_id": link.interrupt_id}
        return _done(request, 200, body, "Approval recorded", "pending", message)
    if r.resumer is None:  # serverless: nothing runs after a frozen function's answer
        resume_within_budget(r, result.run)
    fault("decide.answer")  # the run is handed off: a failure here strands nothing
    title = "Approved" if link.action == "approve" else "Rejected"
    message = f"{title} as {key.name}. The run is resuming; the e-mail's links are now spent."
    body = {"status": "accepted", "decision": link.action, **ids}
    return _done(request, 200, body, title, "applied", message)  # the resume runs after it
