"""The LangGraph Server API, the part of it LangGraph's own clients use for human-in-the-loop,
under ``/lg``: ``langgraph-sdk`` (``get_client(url="<PUBLIC_URL>/lg", api_key=...)``) and Agent
Inbox (deployment URL ``<PUBLIC_URL>/lg``) list the runs that wait as ``interrupted`` threads,
read one with its pending interrupt, and resume it with a command.

A thread is a run (its ``thread_id``); its values are what ``GET /runs/{id}`` shows (the
``approval`` in the HITL request shape, with its ``interrupt_id`` and ``digest``); its one
pending interrupt has the run's ``interrupt_id`` as its id and Agent Inbox's ``HumanInterrupt``
list as its value. A resume is a decision as the caller, through the one decision path
(``Source.LANGGRAPH``), so quorum, separation of duties, authority, the deadline and the digest
apply as everywhere. It must name what the reviewer read: ``command={"resume": {<interrupt id>:
value}}`` (LangGraph's resume by id), ``checkpoint_id=<interrupt id>`` or a ``digest`` in the
value; a resume naming nothing is refused as stale. A "run" here is the resume from one
interrupt: its id is that interrupt's id.

Keys come as ``x-api-key`` (``api.auth``); reads need any role and show a requester only their
own runs, a resume needs reviewer. Starting runs, streaming and editing state are not served:
one 404 ``unsupported``.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from api.auth import Principal, Reader, Reviewer
from api.errors import ApiError, refused
from api.langgraph_views import iso, state_view, thread_view, values_of
from api.models import THREAD_ID
from api.runs import errors
from api.serverless import resume_within_budget
from api.throttle import credential, throttle
from core import settings, shutdown
from core.errors import UserError
from core.faults import fault
from core.identity import identity_key
from inbox.addressed import by_interrupt, names_interrupts
from inbox.agent_inbox import DECISION_KEYS, decisions_of
from store.keys import Role
from store.queue import QueueFilter, threads_page
from store.states import ACTIVE, Run, Status
from worker.ballot import Applied, Decision, Pending, Source
from worker.refusals import Refusal, Refused, unknown_run
from worker.runner import Runner

PREFIX = "/lg"
router = APIRouter(prefix=PREFIX, tags=["langgraph"])
_THREAD_ID = re.compile(THREAD_ID)
JOIN_SECONDS = 120.0  # a join answers by then, with the run's values as they are


def _unsupported(what: str) -> ApiError:
    return ApiError(
        404,
        "unsupported",
        f"{what} is not served here: this LangGraph Server API serves threads/search, "
        "threads/{id}, threads/{id}/state and resuming a thread with a command",
    )


def _runner(request: Request) -> Runner:
    return request.app.state.runner


def _visible(runner: Runner, thread_id: str, who: Principal) -> Run:
    """The run, if ``who`` may see it: a requester only their own (another's is the same 404
    as none, as on ``GET /runs/{id}``)."""
    run = runner.runs.get(thread_id) if _THREAD_ID.fullmatch(thread_id) else None
    if run is None or not (who.has(Role.REVIEWER, Role.OPERATOR) or who.is_(run.requested_by)):
        raise refused(unknown_run(thread_id))
    return run


class Search(BaseModel):
    """``POST /threads/search`` as ``client.threads.search`` sends it."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=10, ge=1, le=100)
    offset: int = Field(default=0, ge=0, le=10_000)
    status: Literal["idle", "busy", "interrupted", "error"] | None = None
    metadata: dict[str, Any] | None = Field(default=None, max_length=20)
    values: dict[str, Any] | None = None
    ids: list[Annotated[str, Field(max_length=128)]] | None = Field(default=None, max_length=100)
    sort_by: Literal["thread_id", "status", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = Field(default=None, max_length=20)
    extract: dict[str, str] | None = None


@router.post("/threads/search", response_model=None, responses=errors())
def search_threads(body: Search, request: Request, who: Reader) -> list[dict[str, Any]]:
    """Threads by status (``interrupted``: the runs waiting on a decision), newest first; a
    requester sees only their own. ``metadata`` matches ``graph_id`` (the workflow) and
    ``requested_by``."""
    if body.values or body.extract:
        raise _unsupported("searching by values or extracting paths")
    metadata = dict(body.metadata or {})
    graph, assistant = metadata.pop("graph_id", None), metadata.pop("assistant_id", None)
    workflow = graph if graph is not None else assistant  # Agent Inbox sends either
    asked_by = metadata.pop("requested_by", None)
    if metadata or not all(isinstance(v, str | None) for v in (workflow, asked_by)):
        return []  # no thread carries other metadata (or a non-text value)
    mine = None if who.has(Role.REVIEWER, Role.OPERATOR) else identity_key(who.name)
    if asked_by is not None and mine is not None and identity_key(asked_by) != mine:
        return []
    where = QueueFilter(workflow=workflow, requested_by=mine or _norm(asked_by))
    order = (body.sort_by or "updated_at", body.sort_order or "desc")
    runner = _runner(request)
    db = runner.store.db
    rows = threads_page(db, body.status, where, body.ids, order, body.offset, body.limit)
    threads = [thread_view(runner, Run.from_row(row)) for row in rows]
    if body.select:
        return [{k: v for k, v in t.items() if k in body.select} for t in threads]
    return threads


def _norm(name: str | None) -> str | None:
    return None if name is None else identity_key(name)


@router.get("/threads/{thread_id}", response_model=None, responses=errors(404))
def get_thread(thread_id: str, request: Request, who: Reader) -> dict[str, Any]:
    """The thread: status, values (the run, its approval in the HITL request shape) and its
    pending interrupt in Agent Inbox's ``HumanInterrupt`` shape."""
    runner = _runner(request)
    return thread_view(runner, _visible(runner, thread_id, who))


@router.get("/threads/{thread_id}/state", response_model=None, responses=errors(404))
def get_thread_state(
    thread_id: str, request: Request, who: Reader, subgraphs: bool = False
) -> dict[str, Any]:
    """The thread's state: values, ``tasks`` and ``interrupts`` (the pending one), and a
    ``checkpoint`` whose id is the interrupt's (a resume may name it)."""
    runner = _runner(request)
    return state_view(runner, _visible(runner, thread_id, who))


class Resume(BaseModel):
    """A run on a thread as ``client.runs.create``/``wait`` send it; only a resume is served."""

    model_config = ConfigDict(extra="ignore")  # stream_mode, durability...: nothing to act on

    assistant_id: str | None = Field(default=None, max_length=200)
    input: Any = None
    command: dict[str, Any] | None = Field(default=None, max_length=3)
    checkpoint_id: str | None = Field(default=None, max_length=200)
    checkpoint: dict[str, Any] | None = Field(default=None, max_length=5)
    webhook: str | None = None
    interrupt_before: Any = None
    interrupt_after: Any = None
    after_seconds: int | None = None


def _named(body: Resume, run: Run) -> tuple[str, Any, str | None]:
    """(interrupt id, resume value, digest) of a resume; refused unless it names the request
    the reviewer read."""
    if body.input is not None or not body.command or "resume" not in body.command:
        raise _unsupported("starting a run (send a command with resume)")
    others = sorted(set(body.command) - {"resume"})
    if others or body.webhook or body.interrupt_before or body.interrupt_after:
        raise _unsupported(f"a run with {', '.join(others) or 'webhook or interrupt_*'}")
    if body.after_seconds:
        raise _unsupported("a delayed run (after_seconds)")
    value = body.command["resume"]
    request = run.asked if run.status == Status.WAITING else None
    if request is not None and names_interrupts(request, value):  # LangGraph's own resume by id
        return run.interrupt_id or "", {"decisions": by_interrupt(request, value)}, None
    named: str | None = None
    if isinstance(value, dict) and len(value) == 1 and not set(value) & DECISION_KEYS:
        [(named, value)] = value.items()
        if len(str(named)) > 200:
            raise refused(Refused(Refusal.INVALID, "invalid decision: no such interrupt id"))
    point = body.checkpoint_id or (body.checkpoint or {}).get("checkpoint_id")
    if point is not None:
        if not isinstance(point, str) or (named is not None and point != named):
            raise refused(Refused(Refusal.INVALID, "the checkpoint and the resume disagree"))
        named = point
    digest = value.get("digest") if isinstance(value, dict) else None
    if digest is not None and not (isinstance(digest, str) and len(digest) <= 64):
        raise refused(Refused(Refusal.INVALID, "invalid decision: digest must be text"))
    if named is None and digest is None:
        raise refused(
            Refused(
                Refusal.STALE,
                "name the request you read: resume with {<interrupt id>: ...} (the id of the "
                "thread's interrupt), checkpoint_id=<interrupt id>, or a digest in the value",
            )
        )
    return named or run.interrupt_id or "", value, digest


def _decide(
    request: Request, thread_id: str, body: Resume, who: Principal
) -> tuple[str, Applied | Pending]:
    throttle(request, "decisions", settings.RATE_LIMIT_DECISIONS, credential(who.name))
    runner = _runner(request)
    run = _visible(runner, thread_id, who)
    interrupt_id, value, digest = _named(body, run)
    decisions: list[Any] = []
    if run.status == Status.WAITING and run.request and run.interrupt_id == interrupt_id:
        try:
            decisions = decisions_of(value, run.request)
        except UserError as exc:
            raise refused(Refused(Refusal.INVALID, f"invalid decision: {exc}")) from None
    result = runner.decide(
        Decision(
            thread_id=run.thread_id,
            interrupt_id=interrupt_id,
            decisions=decisions,
            approvers=[who.name],
            source=Source.LANGGRAPH,
            digest=digest,
            groups={who.name: who.groups},
            provenance=who.provenance,
        )
    )
    if isinstance(result, Refused):
        raise refused(result)
    return interrupt_id, result


def run_shape(run: Run, run_id: str, assistant_id: str | None, extra: dict | None = None) -> dict:
    """A LangGraph ``Run``: the resume from interrupt ``run_id``."""
    if run.status in ACTIVE:
        status = "running"
    elif run.status == Status.WAITING and run.interrupt_id == run_id:
        status = "pending"  # approvals recorded toward a quorum: it waits for more
    elif run.status == Status.FAILED:
        status = "error"
    else:
        status = "interrupted" if run.status in (Status.CANCELLED, Status.EXPIRED) else "success"
    return {
        "run_id": run_id,
        "thread_id": run.thread_id,
        "assistant_id": assistant_id or run.workflow,
        "created_at": iso(run.updated_at),
        "updated_at": iso(run.updated_at),
        "status": status,
        "metadata": {"graph_id": run.workflow, **(extra or {})},
        "multitask_strategy": "reject",
    }


def _recorded(result: Applied | Pending) -> dict[str, Any]:
    if isinstance(result, Pending):
        return {"approvers": result.approvers, "quorum": result.quorum}
    return {"approvers": result.approvers}


@router.post("/threads/{thread_id}/runs", response_model=None, responses=errors(404, 409, 410))
def resume_thread(
    thread_id: str, body: Resume, request: Request, background: BackgroundTasks, who: Reviewer
) -> JSONResponse:
    """Resume the thread with ``command`` as the caller: the decision is taken now and the run
    resumes after the answer (``running``; ``pending`` while a quorum waits for more
    approvals); ``runs.join`` waits for it."""
    runner = _runner(request)
    run_id, result = _decide(request, thread_id, body, who)
    if isinstance(result, Applied) and runner.resumer is None:
        resume_within_budget(runner, result.run)  # serverless: nothing runs after the answer
    fault("decide.answer")  # handed off when claimed: a failure here strands nothing
    run = _visible(runner, thread_id, who)
    shape = run_shape(run, run_id, body.assistant_id, _recorded(result))
    location = f"{PREFIX}/threads/{thread_id}/runs/{run_id}"
    return JSONResponse(shape, headers={"Content-Location": location})


@router.post("/threads/{thread_id}/runs/wait", response_model=None, responses=errors(404, 409, 410))
def resume_thread_and_wait(
    thread_id: str, body: Resume, request: Request, who: Reviewer
) -> JSONResponse:
    """Resume the thread with ``command`` and answer the thread's values once the run has
    finished or paused again (at once when the approval only counts toward a quorum)."""
    runner = _runner(request)
    run_id, result = _decide(request, thread_id, body, who)
    if isinstance(result, Applied) and runner.resumer is None:  # serverless: inline, bounded
        resume_within_budget(runner, result.run, settings.RESUME_BUDGET_SECONDS.get())
    elif isinstance(result, Applied):  # handed off when claimed: wait for it, bounded
        _settled(runner, thread_id, JOIN_SECONDS)
    fault("decide.answer")
    run = _visible(runner, thread_id, who)
    location = f"{PREFIX}/threads/{thread_id}/runs/{run_id}"
    return JSONResponse(values_of(runner, run), headers={"Content-Location": location})


def _settled(runner: Runner, thread_id: str, seconds: float) -> None:
    """Until the run is no longer active (done, paused again, failed), at most ``seconds``."""
    until = time.monotonic() + seconds
    run = runner.runs.get(thread_id)
    while run is not None and run.status in ACTIVE and time.monotonic() < until:
        time.sleep(0.05)  # the resumer moves it; a long-poll bounded by ``seconds``
        run = runner.runs.get(thread_id)


def _resumed(runner: Runner, thread_id: str, run_id: str, who: Principal) -> Run:
    """The run, if ``run_id`` is the interrupt it waits on or the last one decided on it."""
    run = _visible(runner, thread_id, who)
    claim = runner.runs.last_claim(thread_id)
    if run_id not in (run.interrupt_id, claim.facts.get("interrupt_id") if claim else None):
        raise ApiError(404, "not_found", f"no run {run_id[:100]!r} on thread {thread_id!r}")
    return run


@router.get("/threads/{thread_id}/runs/{run_id}", response_model=None, responses=errors(404))
def get_resume(thread_id: str, run_id: str, request: Request, who: Reader) -> dict[str, Any]:
    """The resume from interrupt ``run_id``: ``pending``, ``running``, ``success``, ``error``."""
    runner = _runner(request)
    return run_shape(_resumed(runner, thread_id, run_id, who), run_id, None)


@router.get("/threads/{thread_id}/runs/{run_id}/join", response_model=None, responses=errors(404))
async def join_resume(thread_id: str, run_id: str, request: Request, who: Reader) -> dict:
    """Wait (up to two minutes, or until the app stops) until the run is no longer running;
    the thread's values."""
    runner = _runner(request)
    run = await run_in_threadpool(_resumed, runner, thread_id, run_id, who)
    until = time.monotonic() + JOIN_SECONDS
    while run.status in ACTIVE and time.monotonic() < until and not shutdown.requested():
        await asyncio.sleep(0.1)  # a waiting join holds no worker thread
        run = await run_in_threadpool(_visible, runner, thread_id, who)
    return await run_in_threadpool(values_of, runner, run)


@router.api_route(
    "/{rest:path}",
    methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
    include_in_schema=False,
)
def unsupported(rest: str, who: Reader) -> None:
    raise _unsupported(f"/{rest[:100]}")
