"""Operators' pages: failed runs and stuck ones (running or resuming under an expired lease, so
their process died), with retry and cancel buttons behind the session's CSRF token; and how long
decisions take per workflow (p50/p95, open requests by age, overdue), read from the database."""

from __future__ import annotations

import time
from dataclasses import replace
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

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
from core.errors import UserError, scrub
from core.limits import check_text
from ops import decision_times
from worker.halting import halt, unhalt

router = APIRouter()


def _operator(request: Request) -> tuple[Viewer | None, Response | None]:
    who = viewer(request)
    if who is not None and not who.has("operator"):
        return who, render(
            request, "error.html", {"who": who, "message": "This page needs an operator."}, 403
        )
    return who, None


@router.get("/inbox/runs")
def runs_page(request: Request, status: str = "failed", note: str | None = None) -> Response:
    who, refused = _operator(request)
    if who is None:
        return to_login(request)
    if refused is not None:
        return refused
    reads = runner(request).store.tables.reads()
    listed = reads.stuck_runs(time.time()) if status == "stuck" else reads.failed_runs()
    rows = [replace(row, error=scrub(row.error or "")[:300]) for row in listed]
    context = {"who": who, "rows": rows, "status": "stuck" if status == "stuck" else "failed"}
    return render(request, "runs.html", {**context, "note": (note or "")[:200]})


@router.get("/inbox/decision-times")
def decision_times_page(request: Request) -> Response:
    """p50/p95 from request to decision and to done per workflow (``ops.decision_times``)."""
    who, refused = _operator(request)
    if who is None:
        return to_login(request)
    if refused is not None:
        return refused
    flows = decision_times.read(runner(request).store, time.time())
    context = {"who": who, "flows": list(flows.values()), "bands": decision_times.AGE_LABELS}
    return render(request, "decision_times.html", context)


@router.post("/inbox/runs/{thread_id}/{action}")
def act(thread_id: str, action: str, request: Request, posted: Posted) -> Response:
    """Retry (run it again from its last checkpoint: handed to the app's resumer, as a decision
    is) or cancel, then back to the list."""
    who, refused = _operator(request)
    if who is None:
        return to_login(request)
    if refused is not None:
        return refused
    if not csrf_ok(posted, who.csrf):
        return forbidden_csrf(request, who)
    try:
        check_text(posted.get("reason") or "", "the reason")
        check_text(thread_id, "the run", 200)
    except UserError as exc:
        return render(request, "error.html", {"who": who, "message": str(exc)}, 422)
    r = runner(request)
    back = posted.get("back") if posted.get("back") in ("failed", "stuck") else "failed"
    try:
        current = r.runs.get(thread_id)
        if action == "retry" and current is not None and current.status.active:
            # a stuck run: its lease expired, so take this one over, to the app's resumer
            taken = r.take_over(thread_id, f"inbox:{who.name}")
            note = (
                f"{thread_id}: taken over, now {taken.status}"
                if taken is not None
                else f"{thread_id}: still leased (its process may be alive); nothing done"
            )
        elif action == "retry":
            outcome = r.retry(thread_id)
            note = f"{thread_id}: retried, now {outcome.status}"
        elif action == "cancel":
            note = f"{thread_id}: " + r.cancel(
                thread_id, posted.get("reason") or None, actor=f"inbox:{who.name}"
            )
        else:
            return render(request, "error.html", {"who": who, "message": "Unknown action."}, 404)
    except UserError as exc:
        note = f"{thread_id}: {exc}"
    return RedirectResponse(f"/inbox/runs?status={back}&note={quote(note[:200])}", 303)


@router.get("/inbox/halts")
def halts_page(request: Request, note: str | None = None) -> Response:
    """The stop button: what is halted, and (for admins) halt and lift forms."""
    who, refused = _operator(request)
    if who is None:
        return to_login(request)
    if refused is not None:
        return refused
    found = runner(request).store.tables.halts().current()
    context = {"who": who, "halts": found, "note": (note or "")[:200]}
    return render(request, "halts.html", context)


@router.post("/inbox/halts")
def halt_action(request: Request, posted: Posted) -> Response:
    """Halt or lift (admin role), with the reason given, as the signed-in person."""
    who = viewer(request)
    if who is None:
        return to_login(request)
    if not who.has("admin"):
        message = "Halting needs the admin role."
        return render(request, "error.html", {"who": who, "message": message}, 403)
    if not csrf_ok(posted, who.csrf):
        return forbidden_csrf(request, who)
    kind, name = posted.get("kind") or "", (posted.get("name") or "").strip() or None
    scope = {
        "workflow": name if kind == "workflow" else None,
        "tool": name if kind == "tool" else None,
        "everything": kind == "all",
    }
    store, actor, reason = runner(request).store, f"inbox:{who.name}", posted.get("reason") or ""
    try:
        if posted.get("action") == "lift":
            released = unhalt(store, actor, reason, **scope)  # type: ignore[arg-type]
            note = f"lifted; {released} stopped run(s) handed back to the sweep"
        else:
            note = f"halted: {halt(store, actor, reason, **scope)}"  # type: ignore[arg-type]
    except UserError as exc:
        return render(request, "error.html", {"who": who, "message": str(exc)}, 422)
    return RedirectResponse(f"/inbox/halts?note={quote(note[:200])}", 303)
