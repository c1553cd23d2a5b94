"""The segment runner: run a thread until it finishes or pauses, record the outcome, return.

Nothing waits in memory. A segment starts from whatever the checkpointer holds for the thread and
ends in exactly one recorded state: ``waiting`` (approval opened in the inbox), ``done`` or
``failed``. Resuming is a separate, claimed step, so any process (webhook, sweeper, CLI) can do it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command, Interrupt

from agent.workflows import get_workflow
from inbox import external_id, open_inbox
from inbox.base import Inbox
from inbox.hitl import DECISION_TYPES, summary, validate_decisions
from inbox.outbox import Outbox
from store.db import Store, open_store
from store.errors import UserError
from store.faults import fault
from store.ledger import Ledger
from store.receipts import Receipts
from store.runs import (
    ACTIVE,
    DONE,
    FAILED,
    RESUMING,
    RUNNING,
    WAITING,
    Run,
    RunStore,
    lease_seconds,
    new_owner,
)

TITLE_MAX, DESCRIPTION_MAX = 100, 2000
INTERRUPTED = "interrupted"  # an outcome, not a row status: the row keeps its lease
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
        """One line, always: scripts read run.py's stdout line by line, and a model's answer
        may span paragraphs (the full text stays in the run's ``result``)."""
        if self.status == WAITING:
            text = f"paused on interrupt {self.interrupt_id} - state saved, exiting"
        elif self.status == DONE:
            text = " ".join((self.result or "").split())
        elif self.status == FAILED:
            text = f"failed: {self.error}"
        elif self.status == INTERRUPTED:
            text = f"interrupted ({self.error}); recovery takes it over when its lease ends"
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
            return _text(message.content)
    return ""


def is_per_call(item: Interrupt) -> bool:
    """``HumanInTheLoopMiddleware(interrupt_mode="per_call")``: one interrupt per gated call."""
    return isinstance(item.value, dict) and item.value.get("type") == "tool_approval"


def allowed_from_schema(schema: Any) -> list[str]:
    """The decision types a per-call interrupt's ``response_schema`` accepts (all if unknown)."""
    if not isinstance(schema, dict):
        return list(DECISION_TYPES)
    defs = schema.get("$defs", {})

    def resolve(node: dict) -> dict:
        ref = node.get("$ref", "")
        return defs.get(ref.rsplit("/", 1)[-1], {}) if ref.startswith("#/$defs/") else node

    kinds = []
    for branch in schema.get("oneOf") or schema.get("anyOf") or [schema]:
        kind = resolve(branch).get("properties", {}).get("type", {}).get("const")
        if kind in DECISION_TYPES:
            kinds.append(kind)
    return kinds or list(DECISION_TYPES)


def _call_order(messages: list) -> dict[str, int]:
    order: dict[str, int] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            for tc in message.tool_calls:
                order.setdefault(tc["id"], len(order))
    return order


def _split(interrupts: tuple[Interrupt, ...]) -> tuple[list[Interrupt], list[Interrupt]]:
    batched = sorted((i for i in interrupts if not is_per_call(i)), key=lambda i: i.id)
    return batched, [i for i in interrupts if is_per_call(i)]


def combined_request(interrupts: tuple[Interrupt, ...], messages: list | None = None) -> dict:
    """One HITL request for every interrupt pending on the thread.

    Batched interrupts (ours, or the middleware's default mode) contribute their action requests
    in interrupt-id order; per-call interrupts follow, one action each in the order the model
    made the calls, carrying ``tool_call_id`` so the decision finds its interrupt again.
    """
    batched, per_call = _split(interrupts)
    order = _call_order(messages or [])
    per_call.sort(key=lambda i: (order.get(i.value["tool_call_id"], len(order)), i.id))
    actions: list[dict] = []
    configs: dict[str, dict] = {}
    for item in batched:
        actions.extend(item.value["action_requests"])
        for config in item.value.get("review_configs", []):
            configs.setdefault(config["action_name"], config)
    for item in per_call:
        value = item.value
        actions.append(
            {
                "name": value["name"],
                "args": value["args"],
                "description": value.get("description", ""),
                "tool_call_id": value["tool_call_id"],
            }
        )
        configs.setdefault(
            value["name"],
            {
                "action_name": value["name"],
                "allowed_decisions": allowed_from_schema(item.response_schema),
            },
        )
    return {"action_requests": actions, "review_configs": list(configs.values())}


def resume_command(
    interrupts: tuple[Interrupt, ...], decision: dict, request: dict | None = None
) -> Command:
    """The resume for the pending interrupts, from decisions in ``combined_request`` order.

    One batched interrupt gets the plain ``{"decisions": [...]}``; otherwise an id map: each
    batched interrupt its slice, each per-call interrupt the single decision whose action has
    its ``tool_call_id`` (checked against the interrupt's ``response_schema`` first, since
    LangGraph would raise mid-resume after sibling tools may already have run).
    """
    decisions = decision["decisions"]
    if len(interrupts) == 1 and not is_per_call(interrupts[0]):
        return Command(resume=decision)
    batched, per_call = _split(interrupts)
    actions = (request or {}).get("action_requests", [])
    by_call = {a["tool_call_id"]: i for i, a in enumerate(actions) if "tool_call_id" in a}
    by_id: dict[str, Any] = {}
    start = 0
    for item in batched:
        count = len(item.value["action_requests"])
        by_id[item.id] = {"decisions": decisions[start : start + count]}
        start += count
    for item in per_call:
        index = by_call.get(item.value["tool_call_id"])
        if index is None:
            raise UserError(f"no decision for the call {item.value['tool_call_id']}")
        _check_schema(decisions[index], item.response_schema, item.value["name"])
        by_id[item.id] = decisions[index]
    return Command(resume=by_id)


def _check_schema(decision: Any, schema: Any, name: str) -> None:
    if not isinstance(schema, dict):
        return
    import jsonschema

    try:
        jsonschema.validate(decision, schema)
    except jsonschema.ValidationError as exc:
        raise UserError(f"decision for {name} does not fit its interrupt: {exc.message}") from None


def transcript(messages: list, limit: int = 50, text_limit: int = 2000) -> list[dict]:
    """The conversation so far as plain JSON for reviewers: who said what, which tools ran."""
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
    return "".join(
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str | dict)
    )


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Runner:
    """Starts, claims and resumes runs against one store and one inbox."""

    def __init__(self, store: Store, inbox: Inbox | None = None):
        self.store = store
        self.runs = RunStore(store.db)
        self.inbox = inbox or open_inbox(store.db)
        self.ledger = Ledger(store.db)
        self.receipts = Receipts(store.db)
        self._graphs: dict[str, Any] = {}
        self._schemas: dict[str, dict] = {}

    def graph(self, workflow: str):
        """The workflow's compiled graph (built once per runner)."""
        if workflow not in self._graphs:
            self._graphs[workflow] = get_workflow(workflow).build(
                self.store.checkpointer, self.ledger, self.receipts
            )
        return self._graphs[workflow]

    def args_schemas(self, workflow: str) -> dict[str, dict]:
        """Tool argument schemas that reviewers' edits must satisfy."""
        if workflow not in self._schemas:
            graph = self.graph(workflow)
            self._schemas[workflow] = get_workflow(workflow).args_schemas(graph)
        return self._schemas[workflow]

    # -- starting ---------------------------------------------------------------------------

    def start(
        self,
        text: str,
        *,
        thread_id: str,
        workflow: str = "refund",
        on_start: Callable[[str], None] | None = None,
    ) -> Outcome:
        """Start a run once per thread id; an existing id reports that run instead.

        ``on_start`` gets the model's name once the run exists and its segment begins (so a
        refused start says nothing but the error)."""
        if not text.strip():
            raise UserError("the request text is empty; say what the agent should do")
        self.graph(workflow)  # an unknown or broken workflow is refused before a run exists
        owner = new_owner("run")
        if not self.runs.create(thread_id, workflow, {"text": text}, owner):
            return outcome_of(self.runs.get(thread_id))
        if on_start is not None:
            on_start(get_workflow(workflow).model_name())
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
            validate_decisions(run.request, decision, self.args_schemas(run.workflow))
        except UserError as exc:
            self.runs.record(thread_id, owner, "decision refused", {"error": str(exc)})
            return f"invalid decision: {exc}"
        if not self.runs.claim(thread_id, interrupt_id, decision, owner, decided_by=decided_by):
            return "already claimed"
        return None

    def resume(self, thread_id: str, owner: str) -> Outcome:
        """Carry on a run ``owner`` holds (claimed, reclaimed or retried) from its checkpoint.

        What to feed the graph is read off the checkpoint, never assumed: the approved interrupt
        still pending gets the decision stored at claim time; a thread that stopped between
        nodes continues with ``None``; one that paused again is recorded as waiting; one with no
        checkpoint yet starts from its stored input; a finished one is just marked done.
        """
        run = self.runs.get(thread_id)
        if run is None or run.status not in ACTIVE or run.owner != owner:
            return outcome_of(run) if run else Outcome(thread_id, "unknown", started=False)
        graph = self.graph(run.workflow)
        config = {"configurable": {"thread_id": thread_id}}
        try:
            fault("resume.start")
            state = graph.get_state(config)
        except Exception as exc:  # noqa: BLE001 - recorded (or left to the lease)
            return self._fail(thread_id, owner, run.status, exc)
        pending = [i.id for i in state.interrupts]
        approved = run.status == RESUMING and run.decision is not None
        if pending and approved and sorted(pending) == sorted(run.graph_interrupt_ids):
            try:
                input_: Any = resume_command(state.interrupts, run.decision, run.request)
            except UserError as exc:
                return self._fail(thread_id, owner, run.status, f"decision refused: {exc}")
        elif pending:
            # Paused again (or never recorded its pause): never resume a stale id, LangGraph
            # would ignore it silently. Record the pause that is really there.
            return self._guarded(
                thread_id,
                owner,
                run.status,
                lambda: self._pause(thread_id, run.workflow, owner, run.status, state),
            )
        elif not state.values and run.input:
            input_ = {"messages": [HumanMessage(run.input["text"])]}  # died before checkpoint 1
        else:
            input_ = None
        return self.run_segment(thread_id, run.workflow, input_, owner, run.status)

    def sweep(self) -> list[Outcome]:
        """One recovery pass: runs of dead processes, then answered approvals.

        Lost claims are skipped silently, so any number of sweepers may run at once.
        """
        outcomes = self.recover_expired()
        waiting = self.runs.waiting()
        approvals = self.inbox.get_many([r["interrupt_id"] for r in waiting])
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
            fault("after-claim")
            outcomes.append(self.resume(row["thread_id"], owner))
        return outcomes

    def recover_expired(self) -> list[Outcome]:
        """Take over ``running``/``resuming`` rows whose lease ran out, and finish them."""
        outcomes = []
        for row in self.runs.expired():
            owner = new_owner("recover")
            if self.runs.reclaim(row["thread_id"], row["status"], row["owner"], owner):
                outcomes.append(self.resume(row["thread_id"], owner))
        return outcomes

    def retry(self, thread_id: str) -> Outcome:
        """Retry one failed run now (``recover.py --retry``), whatever its attempt count."""
        run = self.runs.get(thread_id)
        if run is None:
            raise UserError(f"no run {thread_id!r}; `uv run recover.py --list` shows waiting runs")
        if run.status != FAILED:
            raise UserError(f"run {thread_id} is {run.status}, not failed; only failed runs retry")
        return self._retry(thread_id, run.attempts, run.decision) or outcome_of(
            self.runs.get(thread_id)
        )

    def retry_failed(self) -> list[Outcome]:
        """Retry failed runs whose backoff has passed, up to ``RETRY_MAX_ATTEMPTS`` attempts."""
        max_attempts = int(os.environ.get("RETRY_MAX_ATTEMPTS") or 5)
        base = float(os.environ.get("RETRY_BASE_SECONDS") or 30)
        now = self.runs.clock()
        outcomes = []
        for row in self.runs.failed():
            if row["attempts"] >= max_attempts:
                continue
            if now < row["updated_at"] + base * 2 ** max(0, row["attempts"] - 1):
                continue
            decision = None if row["decision"] is None else json.loads(row["decision"])
            outcome = self._retry(row["thread_id"], row["attempts"], decision)
            if outcome:
                outcomes.append(outcome)
        return outcomes

    def _retry(self, thread_id: str, attempts: int, decision: Any) -> Outcome | None:
        owner = new_owner("retry")
        to_status = RUNNING if decision is None else RESUMING
        if not self.runs.retry(thread_id, attempts, to_status, owner):
            return None
        return self.resume(thread_id, owner)

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

        def segment() -> Outcome:
            # Callers never hand ``None`` to a thread with pending interrupts (``resume`` records
            # those as a pause), so there is nothing to read first. ``None`` also carries on
            # past a node whose writes were saved but whose checkpoint was not (a crash in
            # between), which LangGraph shows as ``next == ()``; on a finished thread it is a
            # no-op.
            with self._heartbeat(thread_id, owner):
                graph.invoke(input_, config, durability="sync")
            state = graph.get_state(config)
            if state.interrupts:
                return self._pause(thread_id, workflow, owner, from_status, state)
            result = final_answer(state.values)
            fault("segment.before-done")
            if not self.runs.mark_done(thread_id, owner, from_status, result):
                return outcome_of(self.runs.get(thread_id))
            return Outcome(thread_id, DONE, result=result)

        return self._guarded(thread_id, owner, from_status, segment)

    def _guarded(self, thread_id, owner, from_status, step) -> Outcome:
        try:
            return step()
        except Exception as exc:  # noqa: BLE001 - any failure is recorded on the run
            return self._fail(thread_id, owner, from_status, exc)

    @contextmanager
    def _heartbeat(self, thread_id: str, owner: str) -> Iterator[None]:
        """Renew the lease while the graph runs, so only a dead process's run looks abandoned."""
        stop = threading.Event()
        interval = max(0.1, lease_seconds() / 3)

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    if not self.runs.renew(thread_id, owner):
                        log.warning(
                            "lease on %s lost; its final transition will not apply", thread_id
                        )
                        return
                except Exception as exc:  # noqa: BLE001 - database blip: try next beat
                    log.warning("lease renewal for %s failed: %s", thread_id, one_line(exc))

        thread = threading.Thread(target=beat, name=f"lease-{thread_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _pause(self, thread_id, workflow, owner, from_status, state) -> Outcome:
        messages = state.values.get("messages", [])
        request = combined_request(state.interrupts, messages)
        graph_ids = [i.id for i in state.interrupts]
        asked = next((_text(m.content) for m in messages if isinstance(m, HumanMessage)), "")
        parts = [f"Request: {asked}"] if asked else []
        parts += [a.get("description", "") for a in request["action_requests"]]
        interrupt_id = self.inbox.open(
            external_id=external_id(thread_id),
            dedupe_key=f"{thread_id}:{'+'.join(sorted(graph_ids))}",
            title=_truncate(f"Approve {summary(request)}", TITLE_MAX),
            description=_truncate("\n\n".join(parts), DESCRIPTION_MAX),
            request=request,
            args_schemas=self.args_schemas(workflow),
            conversation=transcript(messages),
        )
        if not self.runs.mark_waiting(
            thread_id, owner, from_status, interrupt_id, graph_ids, request
        ):
            return outcome_of(self.runs.get(thread_id))
        return Outcome(thread_id, WAITING, interrupt_id=interrupt_id)

    def _fail(self, thread_id: str, owner: str, from_status: str, exc: Exception | str) -> Outcome:
        """Record a failure; a database outage instead leaves the run to its lease."""
        error = exc if isinstance(exc, str) else one_line(exc)
        if not isinstance(exc, str) and is_transient(exc):
            log.warning(
                "%s interrupted by a database error, left for recovery: %s", thread_id, error
            )
            return Outcome(thread_id, INTERRUPTED, error=error)
        try:
            self.runs.mark_failed(thread_id, owner, from_status, error)
        except Exception as record_exc:  # noqa: BLE001 - the lease will bring it back
            log.warning("could not record failure of %s: %s", thread_id, one_line(record_exc))
            return Outcome(thread_id, INTERRUPTED, error=error)
        return Outcome(thread_id, FAILED, error=error)


def is_transient(exc: BaseException) -> bool:
    """Errors of the database itself (down, restarted, locked), not of the run."""
    import sqlite3

    import psycopg
    from psycopg_pool import PoolTimeout

    if isinstance(exc, sqlite3.OperationalError):
        return "locked" in str(exc) or "busy" in str(exc)
    return isinstance(exc, psycopg.OperationalError | PoolTimeout)


def recovery_pass(runner: Runner, *, retry_failed: bool = False) -> list[Outcome]:
    """What one ``recover.py`` sweep does, in order: owed webhooks, dead processes' runs,
    answered approvals, and (if asked) failed runs due for a retry."""
    runner.flush_outbox()
    outcomes = runner.sweep()
    if retry_failed:
        outcomes += runner.retry_failed()
    return outcomes


@contextmanager
def open_runner() -> Iterator[Runner]:
    with open_store() as store:
        yield Runner(store)


def run_thread(
    thread_id: str,
    input_: str,
    *,
    workflow: str = "refund",
    on_start: Callable[[str], None] | None = None,
) -> Outcome:
    """Open the store, run one segment of a new thread, record how it ended, return."""
    with open_runner() as runner:
        return runner.start(input_, thread_id=thread_id, workflow=workflow, on_start=on_start)
