"""What the web inbox reads: the queue of waiting runs (keyset-paged, most urgent first), the
failed and stuck runs operators act on, a request's conversation, interrupt id -> thread, and
the LangGraph API's thread search (``api.langgraph_api``).

Named statements, so the pages never build SQL; the queue reads one page of rows through the
``runs (status, expires_at, thread_id)`` index and counts approvals only for the rows shown, so a
page costs the same with 10,000 runs waiting as with ten.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

from store.db import Database
from store.event_rows import AuditEvent
from store.queue_rows import Approver, DecidedRun, InboxCopy, QueuedRun, RunLine
from store.states import Run

PAGE = 50

_QUEUE = """
SELECT thread_id, workflow, request, requested_by, created_at, updated_at, expires_at,
       ladder_step, quorum, interrupt_id,
       (SELECT COUNT(*) FROM run_approvals a
         WHERE a.thread_id = runs.thread_id AND a.interrupt_id = runs.interrupt_id) AS approvals
FROM runs
WHERE status = 'waiting' AND expires_at IS NOT NULL AND expires_at > :now
  AND expires_at >= :after_at AND (expires_at > :after_at OR thread_id > :after_id)
  {filters}
ORDER BY expires_at, thread_id
LIMIT :limit
"""

# Extra conditions, each a fixed text chosen by name (never built from input).
_FILTERS = {
    "workflow": "AND workflow = :workflow",
    "escalated": "AND ladder_step >= 2",
    "mine": "AND requester_key = :me",
    "text": (
        "AND (LOWER(thread_id) LIKE :text OR LOWER(request) LIKE :text OR EXISTS (SELECT 1 FROM "
        "inbox_requests i WHERE i.id = runs.interrupt_id AND LOWER(i.conversation) LIKE :text))"
    ),
    "waiting_on_me": (
        "AND NOT (separation = 1 AND COALESCE(requester_key, '') = :me) "
        "AND NOT EXISTS (SELECT 1 FROM run_approvals m WHERE m.thread_id = runs.thread_id "
        "AND m.interrupt_id = runs.interrupt_id AND (m.reviewer_key = :me OR m.actor_key = :me))"
    ),
}

# "Waiting on me" under the authority matrix: per person the viewer may decide as (themselves,
# then each delegator), the run's band needs none of the groups (no matrix) or one they hold; a
# delegator must not be the requester or have approved already. The text is fixed; only the
# number of placeholders follows the number of people and groups (bounded), never their values.
_MAY = "approver_groups IS NULL"
_HOLDS = "approver_groups LIKE :{name} ESCAPE '\\'"
_FOR = (
    "COALESCE(requester_key, '') NOT IN (:me, :{name}) AND NOT EXISTS (SELECT 1 "
    "FROM run_approvals p WHERE p.thread_id = runs.thread_id AND p.interrupt_id = "
    "runs.interrupt_id AND (p.reviewer_key = :{name} OR p.actor_key = :{name}))"
)
MAX_GROUPS = 100  # of one person, in the view (a key holds at most 50, a JWT claim 100)

_COUNT = """
SELECT COUNT(*) AS n FROM runs
WHERE status = 'waiting' AND expires_at IS NOT NULL AND expires_at > :now {filters}
"""

# Runs a decision (or the deadline) has moved on: newest first, a bounded offset page.
_DECIDED = """
SELECT thread_id, workflow, status, request, requested_by, updated_at, result, interrupt_id,
       decision, error, cancel_reason
FROM runs WHERE status <> 'waiting' AND request IS NOT NULL {filters}
ORDER BY updated_at DESC, thread_id LIMIT :limit OFFSET :offset
"""

_DECIDED_COUNT = """
SELECT COUNT(*) AS n FROM runs WHERE status <> 'waiting' AND request IS NOT NULL {filters}
"""

# How a decided run ended, in the words the Decided view filters by (fixed texts chosen by
# name). The decision is stored as ``json.dumps`` writes it: ``"type": "edit"``.
_APPROVE, _EDIT = """decision LIKE '%"type": "approve"%'""", """decision LIKE '%"type": "edit"%'"""
OUTCOME_FILTERS = {
    "approved": f"AND status = 'done' AND {_APPROVE} AND NOT {_EDIT}",
    "approved with changes": f"AND status = 'done' AND {_EDIT}",
    "rejected": f"AND status = 'done' AND NOT {_APPROVE} AND NOT {_EDIT}",
    "failed": "AND status = 'failed'",
    "expired": "AND status = 'expired'",
    "cancelled": "AND status = 'cancelled'",
    "in progress": "AND status IN ('running', 'resuming')",
}

# What the runs' side effects did (a refund issued, an order placed): the amounts paid.
_EFFECTS = """
SELECT thread_id, detail FROM run_events
WHERE reason = 'side effect' AND thread_id IN ({names}) ORDER BY id
"""

_WORKFLOWS = "SELECT DISTINCT workflow FROM runs WHERE status = 'waiting' ORDER BY workflow"

_FAILED = """
SELECT thread_id, workflow, status, error, attempts, updated_at, lease_until, requested_by
FROM runs WHERE status = 'failed' ORDER BY updated_at DESC, thread_id LIMIT :limit
"""

_STUCK = """
SELECT thread_id, workflow, status, error, attempts, updated_at, lease_until, requested_by
FROM runs WHERE status IN ('running', 'resuming') AND lease_until < :now
ORDER BY lease_until, thread_id LIMIT :limit
"""

# The LangGraph Server API's thread search: runs by its thread statuses, newest first by default.
_THREADS = """
SELECT * FROM runs WHERE ({statuses}) {filters}
ORDER BY {order}, thread_id LIMIT :limit OFFSET :offset
"""

# LangGraph's thread statuses as ours, and the orders a search may ask for: fixed texts
# chosen by name, never built from input. A run still ``waiting`` past its deadline is expired
# already (the next sweep only writes it down): it is idle, not interrupted, from that moment.
THREAD_STATUSES = {
    "interrupted": "status = 'waiting' AND (expires_at IS NULL OR expires_at > :now)",
    "busy": "status IN ('running', 'resuming')",
    "idle": "status IN ('done', 'cancelled', 'expired') OR "
    "(status = 'waiting' AND expires_at <= :now)",
    "error": "status = 'failed'",
}
THREAD_ORDERS = {
    (column, way): f"{column} {way.upper()}"
    for column in ("created_at", "updated_at", "thread_id", "status")
    for way in ("asc", "desc")
}

_THREADS_COUNT = "SELECT COUNT(*) AS n FROM runs WHERE ({statuses}) {filters}"

_BY_INTERRUPT = "SELECT thread_id FROM runs WHERE interrupt_id = :id LIMIT 1"

_CONVERSATION = """
SELECT conversation, title, description FROM inbox_requests WHERE id = :id
"""

_APPROVERS = """
SELECT reviewer, at FROM run_approvals WHERE thread_id = :thread_id AND interrupt_id = :interrupt_id
ORDER BY at
"""


@dataclass(frozen=True)
class Eligible:
    """Someone the viewer may decide as: themselves, or a person who delegated to them."""

    key: str  # normalised name
    groups: frozenset[str]
    delegated: bool = False


@dataclass(frozen=True)
class QueueFilter:
    workflow: str | None = None
    escalated: bool = False
    waiting_on_me: bool = False
    requested_by: str | None = None  # a requester sees only their own runs
    text: str | None = None  # search: order, customer or thread (case-insensitive substring)
    outcome: str | None = None  # decided runs: how they ended (a key of OUTCOME_FILTERS)
    # waiting on me: whom the viewer may decide as (empty: themselves, the matrix aside)
    principals: tuple[Eligible, ...] = ()


def _like(group: str) -> str:
    escaped = group.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%|{escaped}|%"


def _may_approve(principals: tuple[Eligible, ...], params: dict[str, Any]) -> str:
    """The condition that one of ``principals`` may approve the run (see ``_FOR``)."""
    each = []
    for i, who in enumerate(principals):
        held = [_MAY]
        for j, group in enumerate(sorted(who.groups)[:MAX_GROUPS]):
            params[f"g{i}_{j}"] = _like(group)
            held.append(_HOLDS.format(name=f"g{i}_{j}"))
        condition = "(" + " OR ".join(held) + ")"
        if who.delegated:
            params[f"p{i}"] = who.key
            condition += " AND " + _FOR.format(name=f"p{i}")
        each.append(f"({condition})")
    return "AND (" + " OR ".join(each) + ")"


def _where(me: str, where: QueueFilter) -> tuple[list[str], dict[str, Any]]:
    filters: list[str] = []
    params: dict[str, Any] = {"me": me}
    if where.workflow:
        filters.append(_FILTERS["workflow"])
        params["workflow"] = where.workflow
    if where.escalated:
        filters.append(_FILTERS["escalated"])
    if where.waiting_on_me:
        filters.append(_FILTERS["waiting_on_me"])
        if where.principals:
            filters.append(_may_approve(where.principals, params))
    if where.requested_by is not None:
        filters.append(_FILTERS["mine"])
        params["me"] = where.requested_by
    if where.text:
        escaped = where.text.lower().replace("\\", "").replace("%", "")
        filters.append(_FILTERS["text"])
        params["text"] = f"%{escaped[:100]}%"
    if where.outcome in OUTCOME_FILTERS:
        filters.append(OUTCOME_FILTERS[where.outcome])
    return filters, params


def queue_count(db: Database, me: str, where: QueueFilter, now: float | None = None) -> int:
    """How many waiting runs match (for the page title and "n of m"); a run past its deadline
    at ``now`` (default: the wall clock) is not waiting any more, swept or not."""
    filters, params = _where(me, where)
    params["now"] = time.time() if now is None else now
    row = db.one(_COUNT.format(filters="\n  ".join(filters)), params)
    return int(row["n"]) if row else 0


def decided_page(
    db: Database, me: str, where: QueueFilter, offset: int, limit: int = PAGE
) -> tuple[list[DecidedRun], int]:
    """One page of runs no longer waiting that had a request, newest first, and their count."""
    filters, params = _where(me, where)
    joined = "\n  ".join(filters)
    rows = db.all(_DECIDED.format(filters=joined), {**params, "limit": limit, "offset": offset})
    total = db.one(_DECIDED_COUNT.format(filters=joined), params)
    return [DecidedRun.from_row(r) for r in rows], int(total["n"]) if total else 0


def side_effects(db: Database, thread_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each run's side effects (tool, result) in order, for the runs of one page."""
    ids = thread_ids[: PAGE * 2]
    if not ids:
        return {}
    names = ", ".join(f":t{i}" for i in range(len(ids)))
    params = {f"t{i}": t for i, t in enumerate(ids)}
    out: dict[str, list[dict[str, Any]]] = {}
    for row in db.all(_EFFECTS.format(names=names), params):
        out.setdefault(row["thread_id"], []).append(AuditEvent.from_row(row).facts)
    return out


def queue_page(
    db: Database,
    me: str,
    where: QueueFilter,
    after: tuple[float, str] | None = None,
    limit: int = PAGE,
    now: float | None = None,
) -> list[QueuedRun]:
    """One page of waiting runs after the keyset ``after`` (deadline, thread id); ``me`` is the
    viewer's normalised name. A run past its deadline at ``now`` (default: the wall clock) is
    not listed, swept or not."""
    filters, params = _where(me, where)
    params["now"] = time.time() if now is None else now
    params.update(
        after_at=after[0] if after else -1.0, after_id=after[1] if after else "", limit=limit
    )
    rows = db.all(_QUEUE.format(filters="\n  ".join(filters)), params)
    return [QueuedRun.from_row(r) for r in rows]


def waiting_workflows(db: Database) -> list[str]:
    return [r["workflow"] for r in db.all(_WORKFLOWS)]


def failed_runs(db: Database, limit: int = PAGE) -> list[RunLine]:
    return [RunLine.from_row(r) for r in db.all(_FAILED, {"limit": limit})]


def stuck_runs(db: Database, now: float, limit: int = PAGE) -> list[RunLine]:
    """Running or resuming under a lease that expired: their process died."""
    return [RunLine.from_row(r) for r in db.all(_STUCK, {"now": now, "limit": limit})]


def threads_page(
    db: Database,
    status: str | None,
    where: QueueFilter,
    ids: list[str] | None,
    order: tuple[str, str],
    offset: int,
    limit: int,
    now: float | None = None,
) -> list[Run]:
    """One page of runs for the LangGraph thread search. ``status`` is one of
    :data:`THREAD_STATUSES` (None: any); ``ids`` keeps only those. A run still ``waiting`` past
    its deadline at ``now`` (default: the wall clock) comes back as ``expired``, as the next
    sweep will write it."""
    statuses = THREAD_STATUSES[status] if status else "1 = 1"
    filters, params = _where(where.requested_by or "", where)
    params["now"] = at = time.time() if now is None else now
    if ids is not None:
        names = [f":id{i}" for i in range(len(ids))]
        filters.append(f"AND thread_id IN ({', '.join(names) or 'NULL'})")
        params.update({f"id{i}": thread_id for i, thread_id in enumerate(ids)})
    sql = _THREADS.format(
        statuses=statuses, filters="\n  ".join(filters), order=THREAD_ORDERS[order]
    )
    runs = [Run.from_row(r) for r in db.all(sql, {**params, "limit": limit, "offset": offset})]
    return [replace(run, status=run.status_at(at)) for run in runs]


def threads_count(
    db: Database, status: str | None, where: QueueFilter, now: float | None = None
) -> int:
    """How many runs :func:`threads_page` pages through (``threads.count``), judged at ``now``
    as it judges them."""
    statuses = THREAD_STATUSES[status] if status else "1 = 1"
    filters, params = _where(where.requested_by or "", where)
    params["now"] = time.time() if now is None else now
    sql = _THREADS_COUNT.format(statuses=statuses, filters="\n  ".join(filters))
    row = db.one(sql, params)
    return int(row["n"]) if row else 0


def thread_of_interrupt(db: Database, interrupt_id: str) -> str | None:
    row = db.one(_BY_INTERRUPT, {"id": interrupt_id})
    return None if row is None else row["thread_id"]


def inbox_copy(db: Database, interrupt_id: str) -> InboxCopy | None:
    row = db.one(_CONVERSATION, {"id": interrupt_id})
    if row is None:
        return None
    conversation = json.loads(row["conversation"]) if row["conversation"] else []
    return InboxCopy(row["title"] or "", row["description"] or "", conversation)


def approvers(db: Database, thread_id: str, interrupt_id: str) -> list[Approver]:
    rows = db.all(_APPROVERS, {"thread_id": thread_id, "interrupt_id": interrupt_id})
    return [Approver(r["reviewer"], r["at"]) for r in rows]
