"""How ``/lg`` shows a run: as a LangGraph thread and a thread state, in the shapes
``langgraph-sdk`` and Agent Inbox read (``api.langgraph_api`` serves them)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from api.runs import run_view
from inbox.agent_inbox import human_interrupts
from store.states import Run, Status
from worker.runner import Runner

STATUS = {
    Status.WAITING: "interrupted",
    Status.RUNNING: "busy",
    Status.RESUMING: "busy",
    Status.FAILED: "error",
}  # any other: idle


def iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat()


def values_of(runner: Runner, run: Run) -> dict[str, Any]:
    answers = runner.decisions.answers.list(run.thread_id, run.interrupt_id or "")
    values = run_view(run, [{**vars(a)} for a in answers.values()], runner.needs(run))
    if run.status == Status.FAILED:  # as LangGraph's server says a run failed
        values["__error__"] = {"error": "RunFailed", "message": run.error or "the run failed"}
    return values


def _interrupts(run: Run) -> list[dict[str, Any]]:
    if run.status != Status.WAITING or not run.request or not run.interrupt_id:
        return []
    return [{"id": run.interrupt_id, "value": human_interrupts(run.request)}]


def thread_view(runner: Runner, run: Run) -> dict[str, Any]:
    pending = _interrupts(run)
    return {
        "thread_id": run.thread_id,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "metadata": {"graph_id": run.workflow, "requested_by": run.requested_by},
        "status": STATUS.get(run.status, "idle"),
        "values": values_of(runner, run),
        "interrupts": {run.interrupt_id: pending} if pending and run.interrupt_id else {},
    }


def state_view(runner: Runner, run: Run) -> dict[str, Any]:
    pending = _interrupts(run)
    checkpoint = {
        "thread_id": run.thread_id,
        "checkpoint_ns": "",
        "checkpoint_id": run.interrupt_id,
        "checkpoint_map": None,
    }
    task = {
        "id": run.interrupt_id,
        "name": run.workflow,
        "error": None,
        "interrupts": pending,
        "checkpoint": None,
        "state": None,
        "result": None,
    }
    return {
        "values": values_of(runner, run),
        "next": [run.workflow] if pending else [],
        "checkpoint": checkpoint,
        "metadata": {"graph_id": run.workflow, "requested_by": run.requested_by},
        "created_at": iso(run.updated_at),
        "parent_checkpoint": None,
        "tasks": [task] if pending else [],
        "interrupts": pending,
    }
