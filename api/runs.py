"""The run API: start a run, read it and its history, decide, cancel, retry. Every call needs a
credential with a role; the caller's identity is the requester of what they start and the
approver of what they decide."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.responses import JSONResponse

from api.auth import Operator, Principal, Reader, Requester, Reviewer
from api.errors import ApiError, refused
from api.models import (
    RUN_ID,
    Accepted,
    ApprovalRecorded,
    CancelView,
    Decision,
    ErrorBody,
    HistoryView,
    Reason,
    RunView,
    StartRun,
)
from api.serverless import answer_claimed, committed_answer
from api.throttle import credential, over_quota, throttle
from core import settings
from core.errors import UserError
from core.identity import identity_key
from inbox.addressed import by_interrupt
from store.keys import Role
from store.ratelimits import OverQuota
from store.states import Run, Status
from worker.decisions import Decision as Decided
from worker.decisions import Pending, Source
from worker.refusals import Refusal, Refused, unknown_run
from worker.runner import Runner
from worker.workflows import http_names, startable_over_http

router = APIRouter(tags=["runs"])
_RUN_ID = re.compile(RUN_ID)


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI: the error answers a route gives, all in the one error shape."""
    return {code: {"model": ErrorBody} for code in (401, 403, 422, 429, *codes)}


def run_view(
    run: Run, answers: list[dict[str, Any]] | None = None, needs: str | None = None
) -> dict:
    """What a client that lost contact needs to know about its run; ``answers``: the actions
    of its pause answered so far (several interrupts pending); ``needs``: who may approve the
    request it waits on (``Runner.needs``)."""
    view: dict = {
        "thread_id": run.thread_id,
        "workflow": run.workflow,
        "status": run.status,
        "attempts": run.attempts,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "requested_by": run.requested_by,
    }
    if run.status == Status.WAITING and run.request:
        view["approval"] = {
            "interrupt_id": run.interrupt_id,
            "digest": run.request_digest,
            **run.request.to_json(),
        }
        if answers:
            view["approval"]["answers"] = answers
        if needs is not None:
            view["approval"]["needs"] = needs
    if run.expires_at is not None:
        view["expires_at"] = run.expires_at
    if run.status.finished:
        view["result"] = run.result
    if run.cancel_reason is not None:
        view["cancel_reason"] = run.cancel_reason
    if run.status == Status.FAILED:
        view["error"] = run.error
    return view


def scoped_thread_id(requester: str, chosen: str) -> str:
    """A thread id chosen over HTTP, in its requester's own namespace: ``<chosen>.<scope>``,
    the scope a digest of the requester's normalised name. Two requesters choosing one name get
    two runs, and no answer to a requester depends on whether another one's name exists."""
    scope = hashlib.sha256(f"requester:{identity_key(requester)}".encode()).hexdigest()[:12]
    return f"{chosen}.{scope}"


def _runner(request: Request) -> Runner:
    return request.app.state.runner


def _run(runner: Runner, thread_id: str, reader: Principal | None = None) -> Run:
    """The run, if it exists and ``reader`` may see it (a requester sees only their own: the
    answer for someone else's run is the same 404 as for no run)."""
    run = runner.runs.get(thread_id) if _RUN_ID.fullmatch(thread_id) else None
    if run is None:
        raise unknown_run(thread_id)
    if reader is not None and not reader.has(Role.REVIEWER, Role.OPERATOR):
        if not reader.is_(run.requested_by):
            raise unknown_run(thread_id)
    return run


@router.get(
    "/runs/{thread_id}",
    response_model=RunView,
    response_model_exclude_none=True,
    responses=errors(404),
)
def get_run(thread_id: str, request: Request, who: Reader) -> dict[str, Any]:
    """The run's status; while it waits, the approval (actions, arguments, allowed decisions,
    digest). Requesters see their own runs only."""
    runner = _runner(request)
    run = _run(runner, thread_id, who)
    answers = runner.decisions.answers.list(run.thread_id, run.interrupt_id or "")
    return run_view(run, [{**vars(a)} for a in answers.values()], runner.needs(run))


@router.post(
    "/runs",
    status_code=201,
    response_model=RunView,
    response_model_exclude_none=True,
    responses={200: {"model": RunView, "description": "the run already exists"}, **errors(423)},
)
def start_run(body: StartRun, request: Request, who: Requester) -> JSONResponse:
    """Start a run (201) requested by the caller; a ``thread_id`` the caller chose before
    answers that run (200) instead of starting it twice. A chosen id is scoped to the caller:
    the run's id (``thread_id`` in the answer) is ``<chosen>.<scope>``. Without one the run's
    id is ``thread_`` and 32 hex digits, a random UUID (version 4: 122 bits from the server's
    CSPRNG), never an existing run's: a taken id is drawn again, and after three the start is
    refused (409 ``id_taken``, nothing started). 429 past ``RATE_LIMIT_RUNS`` or
    ``MAX_OPEN_RUNS``."""
    throttle(request, "runs", settings.RATE_LIMIT_RUNS, credential(who.name))
    if not startable_over_http(body.workflow):
        raise ApiError(
            422,
            "unknown_workflow",
            f"workflow {body.workflow[:100]!r} cannot be started here; "
            f"choose one of: {', '.join(http_names())}",
        )
    runner = _runner(request)
    thread_id = scoped_thread_id(who.name, body.thread_id) if body.thread_id else None
    try:
        outcome = runner.start(
            body.input,
            thread_id=thread_id,
            workflow=body.workflow,
            expires_in=body.expires_in,
            requested_by=who.name,
            quota=settings.MAX_OPEN_RUNS.get() or None,
        )
    except OverQuota as exc:
        raise over_quota(exc.quota) from None
    status = 201 if outcome.started else 200

    def render() -> JSONResponse:
        run = _run(runner, outcome.thread_id, who)
        return JSONResponse(run_view(run, needs=runner.needs(run)), status_code=status)

    # the run exists: an answer that fails to render still names it (a retry would start another)
    committed = {"thread_id": outcome.thread_id, "workflow": body.workflow}
    committed["status"] = str(outcome.status)
    return committed_answer("start.answer", render, committed, status)


@router.post(
    "/runs/{thread_id}/decision",
    status_code=202,
    response_model=Accepted | ApprovalRecorded,
    responses=errors(404, 409, 410, 423),
)
def decide(
    thread_id: str,
    body: Decision,
    request: Request,
    background: BackgroundTasks,
    who: Reviewer,
) -> JSONResponse:
    """Decide as the caller on the request named by ``interrupt_id`` and ``digest``: 202 when
    the run resumes, or when the approval is recorded toward a quorum; 403 for the requester
    under separation of duties; 409 stale, already decided or already approved by you; 410 late;
    423 halted (the stop button); 429 past ``RATE_LIMIT_DECISIONS``."""
    throttle(request, "decisions", settings.RATE_LIMIT_DECISIONS, credential(who.name))
    runner = _runner(request)
    run = _run(runner, thread_id)
    decisions = body.decisions
    if isinstance(decisions, dict) and run.status != Status.WAITING:
        decisions = []  # the path says why nothing is decided now
    elif isinstance(decisions, dict):  # addressed by interrupt id: positions are the short form
        try:
            decisions = by_interrupt(run.asked, decisions)
        except UserError as exc:
            raise refused(Refused(Refusal.INVALID, f"invalid decision: {exc}")) from None
    decision = Decided.read(
        decisions,
        thread_id=thread_id,
        interrupt_id=body.interrupt_id,
        approvers=[who.name],
        source=Source.API,
        digest=body.digest,
        groups={who.name: who.groups},
        on_behalf_of=body.on_behalf_of,
        provenance=who.provenance,
    )
    result = runner.decide(decision, run=run)
    if isinstance(result, Refused):
        raise refused(result)
    if isinstance(result, Pending):
        return JSONResponse(result.answer(thread_id), status_code=202)
    accepted = {"status": "accepted", "thread_id": thread_id}
    return answer_claimed(runner, result.run, background, accepted)


@router.get(
    "/runs/{thread_id}/history",
    response_model=HistoryView,
    response_model_exclude_none=True,
    responses=errors(404),
)
def run_history(thread_id: str, request: Request, _: Operator) -> dict[str, Any]:
    """The run and its audit trail, in order."""
    runner = _runner(request)
    run = _run(runner, thread_id)
    events = [e.view() for e in runner.store.tables.reads().history(thread_id)]
    return {**run_view(run), "events": events}


@router.post(
    "/runs/{thread_id}/cancel",
    response_model=CancelView,
    response_model_exclude_none=True,
    responses=errors(404, 409),
)
def cancel(
    thread_id: str,
    request: Request,
    who: Operator,
    body: Reason | None = None,
) -> dict[str, Any]:
    """Cancel: at once if it waits or failed, at its next step if it runs; 409 if it ended."""
    runner = _runner(request)
    _run(runner, thread_id)
    message = runner.cancel(thread_id, body.reason if body else None, actor=f"api:{who.name}")
    return {**run_view(_run(runner, thread_id)), "message": message}


@router.post(
    "/runs/{thread_id}/retry",
    response_model=RunView,
    response_model_exclude_none=True,
    responses=errors(404, 409),
)
def retry(thread_id: str, request: Request, _: Operator) -> dict[str, Any]:
    """Retry a failed run now (whatever its attempt count), handed to the app's resumer as a
    decision is: the answer says ``running`` or ``resuming`` until it ends; 409 if it is not
    failed."""
    runner = _runner(request)
    _run(runner, thread_id)
    runner.retry(thread_id)
    return run_view(_run(runner, thread_id))
