"""``/lg`` runs: create, wait, get, list, join, cancel. A run with ``input`` starts the thread's
run as the caller (requester), the same run ``POST /runs`` starts; a run with ``command``
resumes it as the caller (reviewer) through the one decision path and the one hand-off. Each
is an ``lg_runs`` row, ``pending`` when created; the segment that carries it out, in whichever
process, moves it on and keeps its stream (``worker.lg_tap``)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from api.auth import Operator, Principal, Reader
from api.errors import ApiError, refused
from api.langgraph_views import run_shape, values_of
from api.lg_common import (
    PREFIX,
    RunBody,
    assistant_id,
    runner_of,
    unsupported,
    visible,
    workflow_of,
)
from api.lg_decide import decide, named, recorded
from api.runs import errors
from api.serverless import resume_within_budget
from api.throttle import credential, throttle
from core import settings, shutdown
from core.errors import one_line
from core.limits import check_text
from store import halts, lg
from store.keys import Role
from worker import refusals
from worker.ballot import Applied, Pending
from worker.lg_tap import dumps
from worker.runner import Runner
from worker.workflows import startable_over_http

log = logging.getLogger(__name__)
router = APIRouter(prefix=PREFIX, tags=["langgraph"])
JOIN_SECONDS = 120.0  # a join or wait answers by then, with the thread's values as they are


def _text(value: Any) -> str:
    """The request text of a run's ``input``: the last message's content, as LangGraph's
    chat graphs take it (``{"messages": [{"role": "user", "content": ...}]}``)."""
    text: Any = value
    if isinstance(value, dict):
        text = value.get("text")
        messages = value.get("messages")
        if text is None and isinstance(messages, list) and messages:
            last = messages[-1]
            text = last.get("content") if isinstance(last, dict) else None
            if isinstance(text, list):
                text = " ".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
    if not isinstance(text, str) or not text.strip():
        raise ApiError(
            422,
            "invalid",
            'input is {"messages": [{"role": "user", "content": "<what to do>"}]}',
        )
    try:
        return check_text(text, "input", settings.MAX_INPUT_CHARS.get())
    except Exception as exc:  # noqa: BLE001 - the limit's own words
        raise ApiError(422, "invalid", str(exc)) from None


def begin(
    request: Request, thread_id: str, body: RunBody, who: Principal
) -> tuple[lg.LgRun, Callable[[], None] | None]:
    """The new run (``pending``) and, for a start, what starts it; a resume is decided here.
    A refused start or resume leaves no row behind."""
    body.refuse_the_rest()
    modes = body.modes()
    runner = runner_of(request)
    rows = runner.store.tables.lg()
    thread = visible(runner, thread_id, who)
    run_id = str(uuid.uuid4())
    if body.command is not None:
        if body.input is not None:
            raise ApiError(422, "invalid", "a run takes input or a command, not both")
        if not who.has(Role.REVIEWER):
            raise ApiError(403, "forbidden", "resuming a run is a decision: it needs reviewer")
        if thread.run is None:
            raise ApiError(409, "not_waiting", f"thread {thread_id!r} has no run to resume")
        run = thread.run
        answer = named(runner, body, run, who)
        made = rows.new_run(
            run_id, thread_id, assistant_id(run.workflow), modes, {}, runner.clock()
        )
        try:
            result = decide(request, runner, run, answer, who)
        except BaseException:
            rows.drop_run(run_id)  # a refusal leaves every table as it was
            raise
        meta = {"graph_id": run.workflow, **recorded(result)}
        rows.set_metadata(run_id, meta)
        made = replace(made, metadata=meta)  # answered as created: pending
        if isinstance(result, Pending):  # a quorum still short: nothing runs
            rows.set_status(run_id, "success", runner.clock())
        elif isinstance(result, Applied) and runner.resumer is None:  # serverless: inline
            resume_within_budget(runner, result.run)
        return made, None
    if body.input is None:
        raise ApiError(422, "invalid", "a run takes input (to start) or a command (to resume)")
    if not who.has(Role.REQUESTER):
        raise ApiError(403, "forbidden", "starting a run needs requester")
    if thread.run is not None:
        raise ApiError(409, "thread_has_run", "a thread carries one run here: create another")
    workflow = workflow_of(body.assistant_id or "")
    if not startable_over_http(workflow):
        raise ApiError(422, "unknown_workflow", f"workflow {workflow!r} cannot be started here")
    text = _text(body.input)
    throttle(request, "runs", settings.RATE_LIMIT_RUNS, credential(who.name))
    stop = halts.blocking(runner.store.tables.halts().current(), workflow)
    if stop is not None:
        raise refused(refusals.halted(stop))
    meta = {"graph_id": workflow, **(body.metadata or {})}
    made = rows.new_run(run_id, thread_id, assistant_id(workflow), modes, meta, runner.clock())
    return made, lambda: _start(runner, made, text, workflow, who.name)


def _start(runner: Runner, run: lg.LgRun, text: str, workflow: str, requester: str) -> None:
    """Start the thread's run; a start refused after the answer ends the ``/lg`` run in error."""
    try:
        runner.start(
            text,
            thread_id=run.thread_id,
            workflow=workflow,
            requested_by=requester,
            quota=settings.MAX_OPEN_RUNS.get() or None,
        )
    except Exception as exc:  # noqa: BLE001 - said on the run, as LangGraph says a run failed
        log.warning("the /lg run %s did not start: %s", run.run_id, one_line(exc))
        error = {"error": type(exc).__name__, "message": one_line(exc)}
        runner.store.tables.lg().fail(run.run_id, dumps(error), runner.clock())


def location(run: lg.LgRun) -> dict[str, str]:
    return {"Content-Location": f"{PREFIX}/threads/{run.thread_id}/runs/{run.run_id}"}


@router.post("/threads/{thread_id}/runs", response_model=None, responses=errors(404, 409, 410))
def create_run(
    thread_id: str, body: RunBody, request: Request, background: BackgroundTasks, who: Reader
) -> JSONResponse:
    """A run in the background: ``pending`` now; ``runs.join`` waits for it."""
    made, start = begin(request, thread_id, body, who)
    if start is not None:
        background.add_task(start)
    return JSONResponse(run_shape(made), headers=location(made))


async def settled(runner: Runner, run: lg.LgRun, seconds: float = JOIN_SECONDS) -> None:
    """Until the run is no longer pending or running (or ``seconds``, or the app stops)."""
    until = time.monotonic() + seconds
    current: lg.LgRun | None = run
    rows = runner.store.tables.lg()
    while current is not None and current.open and time.monotonic() < until:
        if shutdown.requested():
            return
        await asyncio.sleep(0.05)  # the segment moves it, here or in another process
        current = await run_in_threadpool(rows.run, run.thread_id, run.run_id)


@router.post("/threads/{thread_id}/runs/wait", response_model=None, responses=errors(404, 409, 410))
async def wait_run(thread_id: str, body: RunBody, request: Request, who: Reader) -> JSONResponse:
    """Start or resume, and answer the thread's values once the run ended or paused."""
    runner = runner_of(request)
    made, start = await run_in_threadpool(begin, request, thread_id, body, who)
    if start is not None:
        await run_in_threadpool(start)
    await settled(runner, made)
    thread = await run_in_threadpool(visible, runner, thread_id, who)
    values = await run_in_threadpool(values_of, runner, thread)
    return JSONResponse(values, headers=location(made))


def _run(runner: Runner, thread_id: str, run_id: str, who: Principal) -> lg.LgRun:
    visible(runner, thread_id, who)
    found = runner.store.tables.lg().run(thread_id, run_id[:100])
    if found is None:
        raise ApiError(404, "not_found", f"no run {run_id[:100]!r} on thread {thread_id!r}")
    return found


@router.get("/threads/{thread_id}/runs", response_model=None, responses=errors(404))
def list_runs(
    thread_id: str,
    request: Request,
    who: Reader,
    limit: int = 10,
    offset: int = 0,
    status: str | None = None,
) -> list[dict[str, Any]]:
    runner = runner_of(request)
    visible(runner, thread_id, who)
    found = runner.store.tables.lg().runs(
        thread_id, status, min(max(limit, 1), 100), max(offset, 0)
    )
    return [run_shape(r) for r in found]


@router.get("/threads/{thread_id}/runs/{run_id}", response_model=None, responses=errors(404))
def get_run(thread_id: str, run_id: str, request: Request, who: Reader) -> dict[str, Any]:
    return run_shape(_run(runner_of(request), thread_id, run_id, who))


@router.get("/threads/{thread_id}/runs/{run_id}/join", response_model=None, responses=errors(404))
async def join_run(thread_id: str, run_id: str, request: Request, who: Reader) -> dict:
    """Wait (up to two minutes, or until the app stops) for the run to end or pause; the
    thread's values."""
    runner = runner_of(request)
    made = await run_in_threadpool(_run, runner, thread_id, run_id, who)
    await settled(runner, made)
    thread = await run_in_threadpool(visible, runner, thread_id, who)
    return await run_in_threadpool(values_of, runner, thread)


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel",
    status_code=202,
    response_model=None,
    responses=errors(404, 409),
)
def cancel_run(
    thread_id: str, run_id: str, request: Request, who: Operator, action: str = "interrupt"
) -> None:
    """Cancel the thread's run as ``POST /runs/{id}/cancel`` does (an operator's act): at once
    if it waits, at its next step if it runs; the ``/lg`` run ends ``interrupted``."""
    runner = runner_of(request)
    made = _run(runner, thread_id, run_id, who)
    if action != "interrupt":
        raise unsupported(f"cancelling with action {action[:20]!r}")
    runner.cancel(thread_id, None, actor=f"api:{who.name}")
    runner.store.tables.lg().set_status(made.run_id, "interrupted", runner.clock())
