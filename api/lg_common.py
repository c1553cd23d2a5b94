"""What every ``/lg`` route shares: the prefix, the one 404 for what is not served, who may see
a thread, assistants by id, and the bodies LangGraph's clients send for a run."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from api.auth import Principal
from api.errors import ApiError, refused
from api.models import RUN_ID
from store.keys import Role
from store.lg import LgThread
from store.states import Run
from worker.refusals import unknown_run
from worker.runner import Runner
from worker.workflows import http_names

PREFIX = "/lg"
_THREAD_ID = re.compile(RUN_ID)
_ASSISTANTS = uuid.UUID("6f1d3c1e-37a1-4c55-9a43-5e0f2b7c0d37")  # names assistant ids
STREAM_MODES = {"values", "updates", "custom", "messages-tuple"}  # what a stream carries here
QUIET_MODES = {"events"}  # accepted (Agent Inbox asks for it); nothing is sent for it


def unsupported(what: str) -> ApiError:
    """The one answer for what this LangGraph Server API does not serve."""
    return ApiError(
        404,
        "unsupported",
        f"{what} is not served here: see docs/reference/langgraph.md for the routes served",
    )


def runner_of(request: Request) -> Runner:
    return request.app.state.runner


def assistant_id(workflow: str) -> str:
    """A workflow's assistant: one per registered workflow, its id fixed by the name."""
    return str(uuid.uuid5(_ASSISTANTS, workflow))


def workflow_of(assistant: str) -> str:
    """The workflow an assistant id (or, as LangGraph also accepts, a graph id) names."""
    for name in http_names():
        if assistant in (name, assistant_id(name)):
            return name
    raise ApiError(404, "not_found", f"no assistant {assistant[:100]!r}")


@dataclass(frozen=True)
class Thread:
    """A thread: a run, or one created with ``threads.create`` whose run has not started."""

    thread_id: str
    run: Run | None
    made: LgThread | None

    @property
    def owner(self) -> str | None:
        if self.run is not None:
            return self.run.requested_by
        return None if self.made is None else self.made.created_by


def visible(runner: Runner, thread_id: str, who: Principal) -> Thread:
    """The thread, if ``who`` may see it: a requester only their own (another's is the same 404
    as none, as on ``GET /runs/{id}``)."""
    if not _THREAD_ID.fullmatch(thread_id):
        raise refused(unknown_run(thread_id[:100]))
    run = runner.runs.get(thread_id)
    made = runner.store.tables.lg().thread(thread_id) if run is None else None
    found = Thread(thread_id, run, made)
    if run is None and made is None:
        raise refused(unknown_run(thread_id))
    if not who.has(Role.REVIEWER, Role.OPERATOR) and not who.is_(found.owner):
        raise refused(unknown_run(thread_id))
    return found


class RunBody(BaseModel):
    """A run as ``client.runs.create``/``wait``/``stream`` send it: ``input`` starts one,
    ``command`` resumes one."""

    model_config = ConfigDict(extra="ignore")  # durability, feedback_keys...: nothing to act on

    assistant_id: str | None = Field(default=None, max_length=200)
    input: Any = None
    command: dict[str, Any] | None = Field(default=None, max_length=3)
    checkpoint_id: str | None = Field(default=None, max_length=200)
    checkpoint: dict[str, Any] | None = Field(default=None, max_length=5)
    metadata: dict[str, Any] | None = Field(default=None, max_length=20)
    stream_mode: str | list[str] | None = None
    webhook: str | None = None
    interrupt_before: Any = None
    interrupt_after: Any = None
    after_seconds: int | None = None
    config: dict[str, Any] | None = None

    def modes(self) -> list[str]:
        """The stream modes asked for (LangGraph's default: values); one not served is 404."""
        asked = [self.stream_mode] if isinstance(self.stream_mode, str) else self.stream_mode
        modes = list(dict.fromkeys(asked or ["values"]))
        others = [m for m in modes if m not in STREAM_MODES | QUIET_MODES]
        if others:
            raise unsupported(f"stream mode {others[0][:40]!r}")
        return modes

    def refuse_the_rest(self) -> None:
        """Options with nothing behind them here are refused, never silently dropped."""
        if self.webhook or self.interrupt_before or self.interrupt_after:
            raise unsupported("a run with webhook or interrupt_before/after")
        if self.after_seconds:
            raise unsupported("a delayed run (after_seconds)")
