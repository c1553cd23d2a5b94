"""The run API: start a run, read its status and history, decide, cancel."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from api.errors import ApiError, not_found, refused
from api.serverless import answer_claimed
from store.history import history
from store.runs import new_owner
from store.states import Run, Status
from worker.refusals import NotCancellable, Refused
from worker.runner import Runner

THREAD_ID = r"^[A-Za-z0-9_.:-]{1,128}$"

router = APIRouter()


class StartRun(BaseModel):
    input: str = Field(min_length=1, description="what the agent should do")
    workflow: str = "refund"
    thread_id: str | None = Field(default=None, pattern=THREAD_ID)
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
    view: dict = {
        "thread_id": run.thread_id,
        "workflow": run.workflow,
        "status": run.status,
        "attempts": run.attempts,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
    }
    if run.status == Status.WAITING and run.request:
        view["approval"] = {"interrupt_id": run.interrupt_id, **run.request}
    if run.expires_at is not None:
        view["expires_at"] = run.expires_at
    if run.status.finished:
        view["result"] = run.result
    if run.cancel_reason is not None:
        view["cancel_reason"] = run.cancel_reason
    if run.status == Status.FAILED:
        view["error"] = run.error
    return view


def _runner(request: Request) -> Runner:
    return request.app.state.runner


def _run(runner: Runner, thread_id: str) -> Run:
    run = runner.runs.get(thread_id)
    if run is None:
        raise not_found(thread_id)
    return run


@router.get("/runs/{thread_id}")
def get_run(thread_id: str, request: Request):
    return run_view(_run(_runner(request), thread_id))


@router.post("/runs", status_code=201)
def start_run(body: StartRun, request: Request):
    runner = _runner(request)
    thread_id = body.thread_id or f"thread_{uuid.uuid4().hex[:8]}"
    outcome = runner.start(
        body.input,
        thread_id=thread_id,
        workflow=body.workflow,
        expires_in=body.expires_in,
        requested_by=body.requested_by,
    )
    view = run_view(_run(runner, thread_id))
    return JSONResponse(view, status_code=201 if outcome.started else 200)


@router.post("/runs/{thread_id}/decision", status_code=202)
def decide(thread_id: str, body: Decision, request: Request, background: BackgroundTasks):
    """Apply a decision from any source; a late one is 410 Gone, a stale one 409."""
    runner = _runner(request)
    owner = new_owner("api")
    claimed = runner.claim(
        thread_id,
        body.interrupt_id,
        {"decisions": body.decisions},
        owner,
        approvers=[body.decided_by],
    )
    if isinstance(claimed, Refused):
        raise refused(claimed)
    accepted = {"status": "accepted", "thread_id": thread_id}
    return answer_claimed(runner, thread_id, owner, background, accepted)


@router.get("/runs/{thread_id}/history")
def run_history(thread_id: str, request: Request):
    runner = _runner(request)
    run = _run(runner, thread_id)
    return {**run_view(run), "events": history(runner.store.db, thread_id)}


@router.post("/runs/{thread_id}/cancel")
def cancel(thread_id: str, request: Request, body: Cancel | None = None):
    """200 with the run's view; 409 when the run already ended, 404 when there is none."""
    runner = _runner(request)
    _run(runner, thread_id)
    try:
        message = runner.cancel(thread_id, body.reason if body else None, actor="api")
    except NotCancellable as exc:
        raise ApiError(409, "not_cancellable", str(exc)) from None
    return {**run_view(_run(runner, thread_id)), "message": message}
