"""The segment runner: run a thread until it finishes or pauses, record the outcome, return.

Nothing waits in memory. A segment starts from whatever the checkpointer holds for the thread and
ends in exactly one recorded state: ``waiting`` (approval opened in the inbox), ``done`` or
``failed``. Resuming is a separate, claimed step, so any process (webhook, sweeper, CLI) can do it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command, Interrupt

from agent.graph import build_graph
from agent.workflows import get_workflow
from inbox import external_id, open_inbox
from inbox.base import Inbox
from inbox.hitl import summary, validate_decisions
from inbox.outbox import Outbox
from store.db import Store, open_store
from store.errors import UserError
from store.faults import fault
from store.ledger import Ledger
from store.runs import DONE, FAILED, RESUMING, RUNNING, WAITING, Run, RunStore, new_owner

TITLE_MAX, DESCRIPTION_MAX = 100, 2000
log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """How a segment (or an attempt to start one) ended, for printing and for the API."""

    thread_id: str
    status: str
    interrupt_id: str | None = None
    result: str | None = None
    error: str | None = None
    started: bool = True

    def line(self) -> str:
        if self.status == WAITING:
            text = f"paused on interrupt {self.interrupt_id} - state saved, exiting"
        elif self.status == DONE:
            text = self.result or ""
        elif self.status == FAILED:
            text = f"failed: {self.error}"
        else:
            text = self.status
        if not self.started:
            return f"run {self.thread_id} already exists ({self.status}): {text}"
        return text


def outcome_of(run: Run, *, started: bool = False) -> Outcome:
    return Outcome(run.thread_id, run.status, run.interrupt_id, run.result, run.error, started)


def one_line(exc: BaseException, limit: int = 500) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:limit] if text else type(exc).__name__


def final_answer(values: dict) -> str:
    for message in reversed(values.get("messages", [])):
        if isinstance(message, AIMessage):
            if isinstance(message.content, str):
                return message.content
            return "".join(b.get("text", "") for b in message.content if isinstance(b, dict))
    return ""


def transcript(messages: list, limit: int = 50, text_limit: int = 2000) -> list[dict]:
    """The conversation so far as plain JSON for the inbox: who said what, which tools ran."""
    out: list[dict] = []
    for m in messages[-limit:]:
        text = _truncate(_text(m.content), text_limit)
        if isinstance(m, HumanMessage):
            out.append({"role": "user", "text": text})
        elif isinstance(m, AIMessage):
            entry: dict[str, Any] = {"role": "assistant", "text": text}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {"id": tc["id"], "name": tc["name"], "args": tc["args"]} for tc in m.tool_calls
                ]
            out.append(entry)
        elif isinstance(m, ToolMessage):
            out.append(
                {
                    "role": "tool",
                    "name": m.name,
                    "tool_call_id": m.tool_call_id,
                    "status": m.status,
                    "text": text,
                }
            )
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict))


def combined_request(interrupts: tuple[Interrupt, ...]) -> dict:
    """One approval request for every interrupt pending on the thread, in order."""
    actions: list[dict] = []
    configs: dict[str, dict] = {}
    for item in interrupts:
        actions.extend(item.value["action_requests"])
        for config in item.value.get("review_configs", []):
            configs.setdefault(config["action_name"], config)
    return {"action_requests": actions, "review_configs": list(configs.values())}


def resume_command(interrupts: tuple[Interrupt, ...], decision: dict) -> Command:
    """A plain resume for one pending interrupt; an id map splitting the decisions for several."""
    if len(interrupts) == 1:
        return Command(resume=decision)
    by_id, start = {}, 0
    for item in interrupts:
        count = len(item.value["action_requests"])
        by_id[item.id] = {"decisions": decision["decisions"][start : start + count]}
        start += count
    return Command(resume=by_id)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Runner:
    """Starts, claims and resumes runs against one store and one inbox."""

    def __init__(self, store: Store, inbox: Inbox | None = None):
        self.store = store
        self.runs = RunStore(store.db)
        self.inbox = inbox or open_inbox(store.db)
        self.ledger = Ledger(store.db)
        self._graphs: dict[str, Any] = {}

    def graph(self, workflow: str):
        if workflow not in self._graphs:
            wf = get_workflow(workflow)
            self._graphs[workflow] = build_graph(
                wf.model(), wf.tools, self.ledger, self.store.checkpointer
            )
        return self._graphs[workflow]

    # -- starting ---------------------------------------------------------------------------

    def start(self, text: str, *, thread_id: str, workflow: str = "refund") -> Outcome:
        """Start a run once per thread id; an existing id reports that run instead."""
        if not text.strip():
            raise UserError("the request text is empty; say what the agent should do")
        get_workflow(workflow)
        owner = new_owner("run")
        if not self.runs.create(thread_id, workflow, {"text": text}, owner):
            return outcome_of(self.runs.get(thread_id))
        return self.run_segment(
            thread_id, workflow, {"messages": [HumanMessage(text)]}, owner, RUNNING
        )

    # -- claiming and resuming --------------------------------------------------------------

    def claim(
        self,
        thread_id: str,
        interrupt_id: str,
        decision: Any,
        owner: str,
        *,
        decided_by: str | None = None,
    ) -> str | None:
        """Take a waiting run for ``owner``. None if claimed, else why not (caller does nothing)."""
        run = self.runs.get(thread_id)
        if run is None:
            return "unknown thread"
        if run.status != WAITING:
            return f"run is {run.status}, not waiting"
        if run.interrupt_id != interrupt_id:
            return "run is waiting on a different interrupt"
        try:
            validate_decisions(run.request, decision, get_workflow(run.workflow).args_schemas)
        except UserError as exc:
            self.runs.record(thread_id, owner, "decision refused", {"error": str(exc)})
            return f"invalid decision: {exc}"
        if not self.runs.claim(thread_id, interrupt_id, decision, owner, decided_by=decided_by):
            return "already claimed"
        return None

    def resume(self, thread_id: str, owner: str) -> Outcome:
        """Continue a run ``owner`` has claimed, with the decision stored at claim time."""
        run = self.runs.get(thread_id)
        if run is None or run.status != RESUMING or run.owner != owner:
            return outcome_of(run) if run else Outcome(thread_id, "unknown", started=False)
        fault("resume.start")
        graph = self.graph(run.workflow)
        state = graph.get_state({"configurable": {"thread_id": thread_id}})
        pending = [i.id for i in state.interrupts]
        if pending and sorted(pending) == sorted(run.graph_interrupt_ids):
            input_: Any = resume_command(state.interrupts, run.decision)
        elif pending:
            # Never trust the resume call to refuse a stale id: LangGraph would ignore it silently.
            return self._fail(
                thread_id,
                owner,
                RESUMING,
                "checkpoint waits on other interrupts than the one approved",
            )
        else:
            input_ = None  # stopped between nodes (or already finished): continue from there
        return self.run_segment(thread_id, run.workflow, input_, owner, RESUMING)

    def sweep(self) -> list[Outcome]:
        """Resume every waiting run whose approval is answered; lost claims are skipped."""
        waiting = self.runs.waiting()
        approvals = self.inbox.get_many([r["interrupt_id"] for r in waiting])
        outcomes = []
        for row in waiting:
            approval = approvals.get(row["interrupt_id"])
            if approval is None or not approval.answered:
                continue
            owner = new_owner("recover")
            claimed = self.claim(
                row["thread_id"],
                row["interrupt_id"],
                approval.resume_value(),
                owner,
                decided_by=approval.decided_by,
            )
            if claimed is not None:
                continue
            outcomes.append(self.resume(row["thread_id"], owner))
        return outcomes

    def flush_outbox(self) -> None:
        """Send the local inbox's owed webhooks, so a delivery lost to downtime still lands."""
        try:
            Outbox(self.store.db).deliver_due()
        except UserError as exc:  # polling still resumes the runs; say why webhooks wait
            log.warning("webhook delivery skipped: %s", exc)

    # -- one segment ------------------------------------------------------------------------

    def run_segment(
        self, thread_id: str, workflow: str, input_: Any, owner: str, from_status: str
    ) -> Outcome:
        graph = self.graph(workflow)
        config = {"configurable": {"thread_id": thread_id}}
        try:
            state = graph.get_state(config)
            if input_ is not None or state.next:
                graph.invoke(input_, config, durability="sync")
                state = graph.get_state(config)
            if state.interrupts:
                return self._pause(thread_id, workflow, owner, from_status, state)
            result = final_answer(state.values)
            if not self.runs.mark_done(thread_id, owner, from_status, result):
                return outcome_of(self.runs.get(thread_id))
            return Outcome(thread_id, DONE, result=result)
        except Exception as exc:  # noqa: BLE001 - any failure is recorded on the run
            return self._fail(thread_id, owner, from_status, one_line(exc))

    def _pause(self, thread_id, workflow, owner, from_status, state) -> Outcome:
        interrupts = state.interrupts
        request = combined_request(interrupts)
        graph_ids = [i.id for i in interrupts]
        interrupt_id = self.inbox.open(
            external_id=external_id(thread_id),
            dedupe_key=f"{thread_id}:{'+'.join(graph_ids)}",
            title=_truncate(f"Approve {summary(request)}", TITLE_MAX),
            description=_truncate(
                "\n\n".join(a.get("description", "") for a in request["action_requests"]),
                DESCRIPTION_MAX,
            ),
            request=request,
            args_schemas=get_workflow(workflow).args_schemas,
            conversation=transcript(state.values.get("messages", [])),
        )
        if not self.runs.mark_waiting(
            thread_id, owner, from_status, interrupt_id, graph_ids, request
        ):
            return outcome_of(self.runs.get(thread_id))
        return Outcome(thread_id, WAITING, interrupt_id=interrupt_id)

    def _fail(self, thread_id: str, owner: str, from_status: str, error: str) -> Outcome:
        self.runs.mark_failed(thread_id, owner, from_status, error)
        return Outcome(thread_id, FAILED, error=error)


@contextmanager
def open_runner() -> Iterator[Runner]:
    with open_store() as store:
        yield Runner(store)


def run_thread(thread_id: str, input_: str, *, workflow: str = "refund") -> Outcome:
    """Open the store, run one segment of a new thread, record how it ended, return."""
    with open_runner() as runner:
        return runner.start(input_, thread_id=thread_id, workflow=workflow)
