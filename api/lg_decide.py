"""A resume through ``/lg`` is a decision as the caller, on the one decision path
(``Runner.decide``, ``Source.LANGGRAPH``): quorum, separation of duties, authority, the deadline
and the digest apply as everywhere, and an applied decision goes to the one hand-off.

A resume must answer the request the reviewer read: LangGraph's resume by id
(``{<graph interrupt id>: value}``), ``{<approval interrupt id>: value}``, ``checkpoint_id``
naming the approval, or a ``digest`` in the value. A resume naming none of these, as Agent Inbox
sends it, answers the request this reviewer last read through ``/lg`` (``threads.get``,
``get_state``, ``search``): if the run waits on another since, the path refuses it as stale; if
they never read one, it is refused as stale too.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from api.auth import Principal
from api.errors import refused
from api.lg_common import RunBody, unsupported
from api.throttle import credential, throttle
from core import settings
from core.errors import UserError
from core.identity import identity_key
from inbox.addressed import by_interrupt, names_interrupts
from inbox.agent_inbox import DECISION_KEYS, decisions_of
from store.keys import Role
from store.states import Run, Status
from worker.ballot import Applied, Decision, Pending, Source
from worker.refusals import Refusal, Refused
from worker.runner import Runner


def note_read(runner: Runner, run: Run | None, who: Principal) -> None:
    """Remember the request a reviewer was shown, for a resume that names none."""
    if run is None or run.status != Status.WAITING or not run.interrupt_id:
        return
    if who.has(Role.REVIEWER):
        key = identity_key(who.name)
        rows, now = runner.store.tables.lg(), runner.clock()
        rows.record_read(run.thread_id, key, run.interrupt_id, run.request_digest, now)


def named(runner: Runner, body: RunBody, run: Run, who: Principal) -> tuple[str, Any, str | None]:
    """(interrupt id, resume value, digest) of a resume."""
    assert body.command is not None
    others = sorted(set(body.command) - {"resume"})
    if others or "resume" not in body.command:
        raise unsupported(f"a command with {', '.join(others) or 'no resume'}")
    value = body.command["resume"]
    request = run.asked if run.status == Status.WAITING else None
    if request is not None and names_interrupts(request, value):  # LangGraph's own resume by id
        return run.interrupt_id or "", {"decisions": by_interrupt(request, value)}, None
    name: str | None = None
    if isinstance(value, dict) and len(value) == 1 and not set(value) & DECISION_KEYS:
        [(name, value)] = value.items()
        if len(str(name)) > 200:
            raise refused(Refused(Refusal.INVALID, "invalid decision: no such interrupt id"))
    if name is not None and name in run.graph_interrupt_ids:  # the graph's own id of the pause
        name = run.interrupt_id
    point = body.checkpoint_id or (body.checkpoint or {}).get("checkpoint_id")
    if point is not None and point != run.interrupt_id:
        if point == _checkpoint(runner, run):
            point = None  # the thread's current checkpoint: the resume's natural place
        elif name is None:
            raise refused(
                Refused(
                    Refusal.STALE,
                    "that checkpoint is not the thread's current one (resuming from an "
                    "earlier checkpoint is not served)",
                )
            )
    if point is not None:
        if not isinstance(point, str) or (name is not None and point != name):
            raise refused(Refused(Refusal.INVALID, "the checkpoint and the resume disagree"))
        name = point
    digest = value.get("digest") if isinstance(value, dict) else None
    if digest is not None and not (isinstance(digest, str) and len(digest) <= 64):
        raise refused(Refused(Refusal.INVALID, "invalid decision: digest must be text"))
    if name is None and digest is None:
        read = runner.store.tables.lg().last_read(run.thread_id, identity_key(who.name))
        if read is None:
            raise refused(
                Refused(
                    Refusal.STALE,
                    "name the request you read: resume with {<interrupt id>: ...}, "
                    "checkpoint_id=<interrupt id> or a digest in the value, or read the "
                    "thread first",
                )
            )
        name, digest = read.interrupt_id, read.digest
    return name or run.interrupt_id or "", value, digest


def _checkpoint(runner: Runner, run: Run) -> str | None:
    config = {"configurable": {"thread_id": run.thread_id}}
    snap = runner.graph(run.workflow).get_state(config)
    return (snap.config or {}).get("configurable", {}).get("checkpoint_id")


def decide(
    request: Request, runner: Runner, run: Run, value: tuple[str, Any, str | None], who: Principal
) -> Applied | Pending:
    """The decision ``value`` (from :func:`named`) as ``who``, through the one path."""
    throttle(request, "decisions", settings.RATE_LIMIT_DECISIONS, credential(who.name))
    interrupt_id, answer, digest = value
    decisions: list[Any] = []
    if run.status == Status.WAITING and run.request and run.interrupt_id == interrupt_id:
        try:
            decisions = decisions_of(answer, run.request)
        except UserError as exc:
            raise refused(Refused(Refusal.INVALID, f"invalid decision: {exc}")) from None
    result = runner.decide(
        Decision.read(
            decisions,
            thread_id=run.thread_id,
            interrupt_id=interrupt_id,
            approvers=[who.name],
            source=Source.LANGGRAPH,
            digest=digest,
            groups={who.name: who.groups},
            provenance=who.provenance,
        )
    )
    if isinstance(result, Refused):
        raise refused(result)
    return result


def recorded(result: Applied | Pending) -> dict[str, Any]:
    """What the decision recorded, for the run's ``metadata``."""
    if isinstance(result, Pending):
        return {"approvers": result.approvers, "quorum": result.quorum}
    return {"approvers": result.approvers}
