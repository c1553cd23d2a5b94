"""How ``/lg`` shows a thread, its state, its history and its runs, in the shapes
``langgraph-sdk`` types them: the values are the graph's state as its checkpointer holds it,
the interrupts the graph's own (payload and id); the product's own fields (the run's status,
its approval with digest and approvers) ride in ``metadata``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from api.lg_common import Thread, assistant_id
from api.runs import run_view
from store.lg import LgRun
from store.states import Run, Status
from worker.lg_tap import plain
from worker.runner import Runner

STATUS = {
    Status.WAITING: "interrupted",
    Status.RUNNING: "busy",
    Status.RESUMING: "busy",
    Status.FAILED: "error",
}  # any other: idle


def iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat()


def _config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def snapshot(runner: Runner, run: Run | None) -> Any:
    """The graph's state of the run's thread (None for a thread whose run has not started)."""
    if run is None:
        return None
    return runner.graph(run.workflow).get_state(_config(run.thread_id))


def product(runner: Runner, run: Run | None) -> dict[str, Any]:
    """The product's fields, for ``metadata``: what ``GET /runs/{id}`` shows, and the graph."""
    if run is None:
        return {}
    answers = runner.decisions.answers.list(run.thread_id, run.interrupt_id or "")
    view = run_view(run, [{**vars(a)} for a in answers.values()], runner.needs(run))
    view.pop("thread_id")
    view["status"] = run.status_at(runner.clock())
    return {"graph_id": run.workflow, "assistant_id": assistant_id(run.workflow), **view}


def _checkpoint(thread_id: str, config: dict | None) -> dict[str, Any] | None:
    if not config:
        return None
    configurable = config.get("configurable", {})
    return {
        "thread_id": thread_id,
        "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        "checkpoint_id": configurable.get("checkpoint_id"),
        "checkpoint_map": None,
    }


def _state(thread_id: str, snap: Any, metadata: dict[str, Any]) -> dict[str, Any]:
    """One ``ThreadState`` of a LangGraph ``StateSnapshot``."""
    tasks = [
        {
            "id": t.id,
            "name": t.name,
            "error": None if t.error is None else str(t.error),
            "interrupts": plain(list(t.interrupts)),
            "checkpoint": None,
            "state": None,
            "result": plain(getattr(t, "result", None)),
        }
        for t in snap.tasks
    ]
    return {
        "values": plain(snap.values),
        "next": list(snap.next),
        "checkpoint": _checkpoint(thread_id, snap.config)
        or {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": None},
        "metadata": {**plain(snap.metadata or {}), **metadata},
        "created_at": snap.created_at,
        "parent_checkpoint": _checkpoint(thread_id, snap.parent_config),
        "tasks": tasks,
        "interrupts": plain(list(snap.interrupts)),
    }


def state_view(runner: Runner, thread: Thread) -> dict[str, Any]:
    snap = snapshot(runner, thread.run)
    if snap is None:
        return {
            "values": {},
            "next": [],
            "checkpoint": {
                "thread_id": thread.thread_id,
                "checkpoint_ns": "",
                "checkpoint_id": None,
            },
            "metadata": {} if thread.made is None else dict(thread.made.metadata),
            "created_at": None,
            "parent_checkpoint": None,
            "tasks": [],
            "interrupts": [],
        }
    return _state(thread.thread_id, snap, product(runner, thread.run))


def history(runner: Runner, thread: Thread, limit: int, before: str | None) -> list[dict]:
    """The thread's checkpoints, newest first, as ``ThreadState``s."""
    if thread.run is None:
        return []
    graph = runner.graph(thread.run.workflow)
    config = _config(thread.thread_id)
    after = _config(thread.thread_id, before) if before else None
    return [
        _state(thread.thread_id, snap, {"graph_id": thread.run.workflow})
        for snap in graph.get_state_history(config, limit=limit, before=after)
    ]


def values_of(runner: Runner, thread: Thread) -> dict[str, Any]:
    """The thread's values as ``runs.wait``/``join`` answer them: the graph's state, with
    ``__interrupt__`` while it waits (and ``__error__`` once it failed), as LangGraph does."""
    snap = snapshot(runner, thread.run)
    if snap is None:
        return {}
    values = dict(plain(snap.values))
    if snap.interrupts:
        values["__interrupt__"] = plain(list(snap.interrupts))
    run = thread.run
    if run is not None and run.status == Status.FAILED:
        values["__error__"] = {"error": "RunFailed", "message": run.error or "the run failed"}
    return values


def thread_view(runner: Runner, thread: Thread) -> dict[str, Any]:
    run, made = thread.run, thread.made
    snap = snapshot(runner, run)
    # judged at read time, as the search is: past its deadline a waiting run is expired (idle,
    # nothing to answer) before any sweep has written that down
    status = None if run is None else run.status_at(runner.clock())
    waits = snap is not None and status != Status.EXPIRED
    interrupts = {t.id: plain(list(t.interrupts)) for t in snap.tasks} if waits else {}
    created = run.created_at if run is not None else made.created_at if made else None
    return {
        "thread_id": thread.thread_id,
        "created_at": iso(created),
        "updated_at": iso(run.updated_at if run is not None else created),
        "metadata": {**(made.metadata if made else {}), **product(runner, run)},
        "status": "idle" if status is None else STATUS.get(status, "idle"),
        "values": {} if snap is None else plain(snap.values),
        "interrupts": {k: v for k, v in interrupts.items() if v},
    }


def run_shape(run: LgRun) -> dict[str, Any]:
    """A LangGraph ``Run``: one start or resume through ``/lg``."""
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "assistant_id": run.assistant_id,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "status": run.status,
        "metadata": run.metadata,
        "multitask_strategy": "reject",
    }
