"""``/lg`` threads: create, get, search, count, state, history, Agent Inbox's ignore as a state
update, delete. Keys come as ``x-api-key``; reads need any role and show a requester only their
own threads."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from api.auth import Reader, Requester, Reviewer
from api.errors import ApiError
from api.langgraph_views import history, state_view, thread_view
from api.lg_common import PREFIX, RunBody, Thread, runner_of, unsupported, visible
from api.lg_decide import decide, named, note_read
from api.runs import errors
from core.identity import identity_key
from store.keys import Role
from store.queue import QueueFilter
from store.states import Run
from worker.runner import Runner

router = APIRouter(prefix=PREFIX, tags=["langgraph"])


class NewThread(BaseModel):
    model_config = ConfigDict(extra="ignore")  # supersteps, ttl: nothing to act on

    thread_id: str | None = None
    metadata: dict[str, Any] | None = Field(default=None, max_length=20)
    if_exists: str | None = None


@router.post("/threads", response_model=None, responses=errors())
def create_thread(body: NewThread, request: Request, who: Requester) -> dict[str, Any]:
    """An empty thread, the caller's; its run starts with ``runs.create``/``stream``/``wait``
    with ``input``. Its id is drawn here (a chosen one is not served)."""
    if body.thread_id is not None:
        raise unsupported("choosing a thread's id")
    runner = runner_of(request)
    thread_id = str(uuid.uuid4())
    metadata = dict(body.metadata or {})
    runner.store.tables.lg().create_thread(thread_id, who.name, metadata, runner.clock())
    return thread_view(runner, visible(runner, thread_id, who))


class Search(BaseModel):
    """``POST /threads/search`` (and ``/threads/count``) as the SDK sends it."""

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


def _where(body: Search, who: Any) -> QueueFilter | None:
    """The filter of a search, or None when nothing can match."""
    if body.values or body.extract:
        raise unsupported("searching by values or extracting paths")
    metadata = dict(body.metadata or {})
    graph, assistant = metadata.pop("graph_id", None), metadata.pop("assistant_id", None)
    workflow = graph if graph is not None else assistant  # Agent Inbox sends either
    asked_by = metadata.pop("requested_by", None)
    if metadata or not all(isinstance(v, str | None) for v in (workflow, asked_by)):
        return None  # no thread carries other metadata (or a non-text value)
    mine = None if who.has(Role.REVIEWER, Role.OPERATOR) else identity_key(who.name)
    if asked_by is not None and mine is not None and identity_key(asked_by) != mine:
        return None
    return QueueFilter(
        workflow=workflow,
        requested_by=mine or (None if asked_by is None else identity_key(asked_by)),
    )


@router.post("/threads/search", response_model=None, responses=errors())
def search_threads(body: Search, request: Request, who: Reader) -> list[dict[str, Any]]:
    """Threads that have a run, by status (``interrupted``: waiting on a decision), newest
    first; a requester sees only their own. ``metadata`` matches ``graph_id`` (or
    ``assistant_id``: the workflow) and ``requested_by``."""
    where = _where(body, who)
    if where is None:
        return []
    order = (body.sort_by or "updated_at", body.sort_order or "desc")
    runner = runner_of(request)
    runs = runner.store.tables.reads().threads_page(
        body.status, where, body.ids, order, body.offset, body.limit
    )
    threads = []
    for run in runs:
        note_read(runner, run, who)
        threads.append(thread_view(runner, Thread(run.thread_id, run, None)))
    if body.select:
        return [{k: v for k, v in t.items() if k in body.select} for t in threads]
    return threads


@router.post("/threads/count", response_model=None, responses=errors())
def count_threads(body: Search, request: Request, who: Reader) -> int:
    """How many threads a search with the same filters finds."""
    where = _where(body, who)
    return (
        0
        if where is None
        else runner_of(request).store.tables.reads().threads_count(body.status, where)
    )


@router.get("/threads/{thread_id}", response_model=None, responses=errors(404))
def get_thread(thread_id: str, request: Request, who: Reader) -> dict[str, Any]:
    runner = runner_of(request)
    thread = visible(runner, thread_id, who)
    note_read(runner, thread.run, who)
    return thread_view(runner, thread)


@router.get("/threads/{thread_id}/state", response_model=None, responses=errors(404))
def get_state(
    thread_id: str, request: Request, who: Reader, subgraphs: bool = False
) -> dict[str, Any]:
    """The graph's state: values, next, tasks and the interrupts, the graph's own."""
    runner = runner_of(request)
    thread = visible(runner, thread_id, who)
    note_read(runner, thread.run, who)
    return state_view(runner, thread)


class History(BaseModel):
    model_config = ConfigDict(extra="ignore")

    limit: int = Field(default=10, ge=1, le=1000)
    before: str | dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None


@router.post("/threads/{thread_id}/history", response_model=None, responses=errors(404))
def get_history(thread_id: str, body: History, request: Request, who: Reader) -> list[dict]:
    """The thread's checkpoints, newest first."""
    runner = runner_of(request)
    before = body.before
    if isinstance(before, dict):
        before = before.get("checkpoint_id")
    return history(runner, visible(runner, thread_id, who), body.limit, before)


@router.get("/threads/{thread_id}/history", response_model=None, responses=errors(404))
def get_history_query(
    thread_id: str, request: Request, who: Reader, limit: int = 10, before: str | None = None
) -> list[dict]:
    runner = runner_of(request)
    return history(runner, visible(runner, thread_id, who), min(max(limit, 1), 1000), before)


class StateUpdate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    values: Any = None
    as_node: str | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None


@router.post("/threads/{thread_id}/state", response_model=None, responses=errors(404, 409, 410))
def update_state(
    thread_id: str, body: StateUpdate, request: Request, who: Reviewer
) -> dict[str, Any]:
    """Agent Inbox's ignore (``values: null, as_node: "__end__"``): every action of the
    request the reviewer read is rejected, through the one decision path. No other state
    edit is served."""
    if body.values is not None or body.as_node != "__end__":
        raise unsupported("editing a thread's state (only Agent Inbox's ignore is served)")
    runner = runner_of(request)
    run = _waiting_run(runner, thread_id, who)
    actions = len(run.asked.actions)
    resume = RunBody(command={"resume": [{"type": "ignore", "args": None}] * max(actions, 1)})
    decide(request, runner, run, named(runner, resume, run, who), who)
    after = visible(runner, thread_id, who)
    return {"checkpoint": state_view(runner, after)["checkpoint"]}


def _waiting_run(runner: Runner, thread_id: str, who: Any) -> Run:
    thread = visible(runner, thread_id, who)
    if thread.run is None:
        raise ApiError(409, "not_waiting", f"thread {thread_id!r} has no run yet")
    return thread.run


@router.delete(
    "/threads/{thread_id}", status_code=204, response_model=None, responses=errors(404, 409)
)
def delete_thread(thread_id: str, request: Request, who: Reader) -> None:
    """Delete a thread whose run has not started (its creator or an operator). A thread with
    a run keeps it: the run's record and audit trail go only by retention."""
    runner = runner_of(request)
    thread = visible(runner, thread_id, who)
    if thread.run is not None:
        raise ApiError(
            409,
            "kept",
            "a thread with a run is kept with its audit trail; retention deletes it",
        )
    if not (who.has(Role.OPERATOR) or who.is_(thread.owner)):
        raise ApiError(403, "forbidden", "only its creator or an operator deletes a thread")
    runner.store.tables.lg().drop_thread(thread_id)
