"""The worker's HTTP face: signed inbox webhooks in, the run status API, health.

Built by :func:`create_app` (``webhook.py`` exposes it as ``app``). The claim is committed
before the 2xx goes out and the resume runs after it, so the response never waits for the agent,
and a process killed in between leaves a claimed run that the lease lets ``recover.py`` finish.
"""

from __future__ import annotations

import os
import re
from contextlib import asynccontextmanager

from fastapi import BackgroundTasks, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from agent.runner import REFUSED_EXPIRED, NotCancellable, Runner
from api.limits import BodyLimit
from api.webhooks import receive
from store.db import open_store
from store.errors import UserError
from store.runs import CANCELLED, DONE, EXPIRED, FAILED, WAITING, Run, new_owner

SOURCES = ("vigilator", "local")
NEW_SECRET = (
    'python -c "import base64, secrets; '
    "print('whsec_' + base64.b64encode(secrets.token_bytes(32)).decode())\""
)
THREAD_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def webhook_verifier():
    """A Svix verifier for ``WEBHOOK_SECRET``; refuses to go on without a valid one."""
    from api.webhooks import SvixVerifier

    secret = os.environ.get("WEBHOOK_SECRET")
    if not secret:
        raise UserError(f"WEBHOOK_SECRET is not set; make one with: {NEW_SECRET}")
    try:
        return SvixVerifier(secret)
    except Exception:  # noqa: BLE001 - never echo the secret
        raise UserError(
            f"WEBHOOK_SECRET is not a valid whsec_... secret; make one with: {NEW_SECRET}"
        ) from None


class StartRun(BaseModel):
    input: str = Field(min_length=1, description="what the agent should do")
    workflow: str = "refund"
    thread_id: str | None = Field(default=None, pattern=THREAD_ID.pattern)
    expires_in: str | float | None = Field(
        default=None, description="approval window for this run, e.g. 2h (default: policy)"
    )
    requested_by: str | None = Field(
        default=None, description="who asks; with SEPARATION_OF_DUTIES=1 they may not approve"
    )


class Cancel(BaseModel):
    reason: str | None = Field(default=None, description="why, kept on the run")


class Decision(BaseModel):
    interrupt_id: str = Field(description="the approval the decisions answer")
    decisions: list[dict] = Field(description="one HITL decision per proposed action")
    decided_by: str = Field(min_length=1, description="who decided, for the audit trail")


def run_view(run: Run) -> dict:
    """What a client that lost contact needs to know about its run."""
    view = {
        "thread_id": run.thread_id,
        "workflow": run.workflow,
        "status": run.status,
        "attempts": run.attempts,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
    }
    if run.status == WAITING and run.request:
        view["approval"] = {"interrupt_id": run.interrupt_id, **run.request}
    if run.expires_at is not None:
        view["expires_at"] = run.expires_at
    if run.status in (DONE, EXPIRED, CANCELLED):
        view["result"] = run.result
    if run.cancel_reason is not None:
        view["cancel_reason"] = run.cancel_reason
    if run.status == FAILED:
        view["error"] = run.error
    return view


def create_app() -> FastAPI:
    verifier = webhook_verifier()
    context = open_store()
    store = context.__enter__()  # open now: a bad DATABASE_URL stops start-up with one line
    runner = Runner(store)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            yield
        finally:
            context.__exit__(None, None, None)

    app = FastAPI(title="approval-worker", lifespan=lifespan)
    app.add_middleware(BodyLimit)
    app.state.runner = runner

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError):
        return JSONResponse({"error": str(exc)}, status_code=422)

    @app.post("/webhooks/{source}")
    async def webhook(source: str, request: Request, background: BackgroundTasks):
        if source not in SOURCES:
            raise HTTPException(404, f"unknown webhook source {source!r}")
        body = await request.body()
        reply = await run_in_threadpool(
            receive, runner, verifier, source, body, dict(request.headers)
        )
        if reply.resume:
            background.add_task(runner.resume, *reply.resume)
        return JSONResponse(reply.body, status_code=reply.status_code)

    @app.get("/runs/{thread_id}")
    def get_run(thread_id: str):
        run = runner.runs.get(thread_id)
        if run is None:
            raise HTTPException(404, f"no run {thread_id!r}")
        return run_view(run)

    @app.post("/runs", status_code=201)
    def start_run(body: StartRun):
        import uuid

        thread_id = body.thread_id or f"thread_{uuid.uuid4().hex[:8]}"
        outcome = runner.start(
            body.input,
            thread_id=thread_id,
            workflow=body.workflow,
            expires_in=body.expires_in,
            requested_by=body.requested_by,
        )
        view = run_view(runner.runs.get(thread_id))
        return JSONResponse(view, status_code=201 if outcome.started else 200)

    @app.post("/runs/{thread_id}/decision", status_code=202)
    def decide(thread_id: str, body: Decision, background: BackgroundTasks):
        """Apply a decision from any source; a late one is 410 Gone, a stale one 409."""
        owner = new_owner("api")
        reason = runner.claim(
            thread_id,
            body.interrupt_id,
            {"decisions": body.decisions},
            owner,
            decided_by=body.decided_by,
        )
        if reason == "unknown thread":
            raise HTTPException(404, f"no run {thread_id!r}")
        if reason == REFUSED_EXPIRED:
            raise HTTPException(410, f"the approval for run {thread_id} expired")
        if reason and reason.startswith("invalid decision"):
            raise HTTPException(422, reason)
        if reason:
            raise HTTPException(409, reason)
        background.add_task(runner.resume, thread_id, owner)
        return {"status": "accepted", "thread_id": thread_id}

    @app.get("/runs/{thread_id}/history")
    def run_history(thread_id: str):
        from store.history import history

        run = runner.runs.get(thread_id)
        if run is None:
            raise HTTPException(404, f"no run {thread_id!r}")
        return {**run_view(run), "events": history(store.db, thread_id)}

    @app.post("/runs/{thread_id}/cancel")
    def cancel(thread_id: str, body: Cancel | None = None):
        """200 with the run's view; 409 when the run already ended, 404 when there is none."""
        if runner.runs.get(thread_id) is None:
            raise HTTPException(404, f"no run {thread_id!r}")
        try:
            message = runner.cancel(thread_id, body.reason if body else None, actor="api")
        except NotCancellable as exc:
            raise HTTPException(409, str(exc)) from None
        return {**run_view(runner.runs.get(thread_id)), "message": message}

    @app.get("/healthz")
    def healthz():
        try:
            store.db.one("SELECT 1 AS ok")
        except Exception as exc:  # noqa: BLE001 - report, do not crash the probe
            return JSONResponse({"status": "unavailable", "error": type(exc).__name__}, 503)
        return {"status": "ok", "database": store.db.backend}

    return app
