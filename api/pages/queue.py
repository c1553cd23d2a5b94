"""The queue page: waiting runs, most urgent first, keyset-paged 50 at a time, with filters.

Reviewers and operators see every waiting run; a requester sees only their own, read-only.
"Waiting on me" lists what the viewer may approve now: not their own request (under separation
of duties), not approved by them yet, and within the authority matrix for them or for someone
who delegated to them (the one decision path's rules, read from what the run fixed). The
SQL is in :mod:`store.queue`; here rows become what a person scans: a summary of the proposed
actions, the amount, how long it has waited, the deadline, reminder/escalation marks and quorum
progress.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api.pages.session import Viewer, render, runner, to_login, viewer
from inbox.views import ActionView, as_decided, money
from store.queue import (
    OUTCOME_FILTERS,
    PAGE,
    Eligible,
    QueueFilter,
)
from store.queue_rows import DecidedRun, QueuedRun
from store.states import Run
from worker.delegation import principals
from worker.runner import Runner

router = APIRouter()


def summary(views: list[ActionView]) -> tuple[str, str]:
    """The proposed actions in one line each, and the money they move, with its currency."""
    amounts = [v for v in views if v.amount is not None]
    currencies = {v.currency for v in amounts}
    if not amounts:
        amount = ""
    elif len(currencies) == 1 and None not in currencies:
        amount = money(sum((v.amount or Decimal(0)) for v in amounts), str(amounts[0].currency))
    else:
        amount = "; ".join(v.amount_text for v in amounts)
    return "; ".join(v.summary for v in views), amount


def _after(raw: str | None) -> tuple[float, str] | None:
    """``?after=<expires_at>,<thread_id>``; anything unparsable starts from the top."""
    if not raw or "," not in raw:
        return None
    at, _, thread_id = raw.partition(",")
    try:
        return float(at), thread_id
    except ValueError:
        return None


def _rows(r: Runner, rows: Sequence[QueuedRun | DecidedRun], now: float) -> list[dict[str, Any]]:
    """The page's rows, the workflows' reads shared across them (one ledger read per order):
    each as it stands (a quorum's standing proposal, a decided run's approved arguments) and,
    once decided, how it ended."""
    effects = r.store.tables.reads().side_effects(
        [row.thread_id for row in rows if isinstance(row, DecidedRun)]
    )
    with r.graphs.reading_many({row.workflow for row in rows}):
        return [_row(r, row, now, effects.get(row.thread_id, [])) for row in rows]


def _standing(r: Runner, row: QueuedRun | DecidedRun) -> tuple[Any, str]:
    """The request as it stands: a decided run's decision applied, or a quorum's first
    approver's changes; and who changed it."""
    if isinstance(row, DecidedRun):
        return as_decided(row.request, _json(row.decision)), ""
    if not row.approvals or not row.interrupt_id:
        return row.request, ""
    so_far = r.store.tables.approvals().list(row.thread_id, row.interrupt_id)
    if not so_far or all(d.get("type") == "approve" for d in so_far[0].decisions):
        return row.request, ""
    standing = as_decided(row.request, {"decisions": so_far[0].decisions})
    return standing, so_far[0].reviewer


def _row(
    r: Runner, row: QueuedRun | DecidedRun, now: float, effects: list[dict[str, Any]]
) -> dict[str, Any]:
    request, changed_by = _standing(r, row)
    actions, amount = summary(r.graphs.views(row.workflow, request))
    shown = {
        "changed_by": changed_by,
        "outcome": ended(row, effects) if isinstance(row, DecidedRun) else None,
        "thread_id": row.thread_id,
        "workflow": row.workflow,
        "actions": actions,
        "amount": amount,
        "requested_by": row.requested_by or "",
        "waiting": now - row.updated_at,
        "updated_at": row.updated_at,
    }
    if isinstance(row, DecidedRun):
        return shown | {
            "expires_at": None,
            "left": 0.0,
            "mark": "",
            "approvals": 0,
            "quorum": 1,
            "status": row.status,
            "result": row.result or "",
        }
    return shown | {
        "expires_at": row.expires_at,
        "left": row.expires_at - now,
        "mark": {1: "reminded", 2: "escalated"}.get(row.ladder_step, ""),
        "approvals": row.approvals,
        "quorum": row.quorum or 1,
        "status": "waiting",
        "result": "",
    }


def principals_of(request: Request, who: Viewer) -> tuple[Eligible, ...]:
    """Whom the viewer may decide as ("waiting on me" follows the authority matrix): themselves
    with their groups, and each person who delegated to them, with the groups lent."""
    lent = runner(request).store.tables.delegations()
    return principals(who.name, frozenset(who.groups), lent)


OUTCOMES = tuple(OUTCOME_FILTERS)


def _json(raw: Any) -> Any:
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None


def _paid(effects: list[dict[str, Any]]) -> str:
    """The money the run's side effects moved, in its currency ("EUR 150.00")."""
    moved: dict[str, Decimal] = {}
    for e in effects:
        result: dict[str, Any] = e["result"] if isinstance(e.get("result"), dict) else {}
        value = result.get("amount", result.get("total"))
        if result.get("error") or value is None or not result.get("currency"):
            continue
        cur = str(result["currency"])
        moved[cur] = moved.get(cur, Decimal(0)) + Decimal(str(value))
    return "; ".join(money(v, c) for c, v in moved.items())


def ended(row: DecidedRun | Run, effects: list[dict[str, Any]]) -> dict[str, str]:
    """How a decided run ended, in the Decided view's words: a badge (``word``, one of the
    filters' or "not carried out"), the money paid and why, when there is a why."""
    status = str(row.status)
    if status in ("running", "resuming"):
        return {"word": "in progress", "paid": "", "reason": ""}
    if status == "failed":
        return {"word": "failed", "paid": "", "reason": str(row.error or "")[:300]}
    if status == "expired":
        return {"word": "expired", "paid": "", "reason": "no decision before the deadline"}
    if status == "cancelled":
        return {"word": "cancelled", "paid": "", "reason": str(row.cancel_reason or "")}
    decided = _json(row.decision)
    raw = decided.get("decisions") if isinstance(decided, dict) else None
    items = [d for d in raw or [] if isinstance(d, dict)]
    kinds = {d.get("type") for d in items}
    if not kinds & {"approve", "edit"}:
        said = "; ".join(str(d["message"]) for d in items if d.get("message"))
        return {"word": "rejected", "paid": "", "reason": said[:300]}
    word = "approved with changes" if "edit" in kinds else "approved"
    paid = _paid(effects)
    errors = [
        str(e["result"]["error"])
        for e in effects
        if isinstance(e.get("result"), dict) and e["result"].get("error")
    ]
    if not paid and errors:
        return {"word": "not carried out", "paid": "", "reason": errors[0][:300]}
    return {"word": word, "paid": paid, "reason": ""}


@router.get("/inbox")
def queue(
    request: Request,
    workflow: str | None = None,
    escalated: str | None = None,
    mine: str | None = None,
    after: str | None = None,
    q: str | None = None,
    view: str | None = None,
    outcome: str | None = None,
    page: int = 1,
) -> Response:
    who = viewer(request)
    if who is None:
        return to_login(request)
    decided = view == "decided"
    where = QueueFilter(
        workflow=workflow or None,
        escalated=bool(escalated) and not decided,
        waiting_on_me=bool(mine) and who.sees_all and not decided,
        principals=principals_of(request, who) if mine else (),
        requested_by=None if who.sees_all else who.key,
        text=(q or "").strip()[:100] or None,
        outcome=outcome if decided and outcome in OUTCOMES else None,
    )
    r = runner(request)
    reads = r.store.tables.reads()
    now = time.time()
    query = {
        "workflow": workflow or "",
        "escalated": escalated or "",
        "mine": mine or "",
        "q": where.text or "",
        "view": "decided" if decided else "",
        "outcome": where.outcome or "",
    }
    query = {k: v for k, v in query.items() if v}
    next_url = prev_url = None
    page = min(max(page, 1), 200)
    if decided:
        ended_runs, total = reads.decided_page(who.key, where, (page - 1) * PAGE, PAGE)
        shown = _rows(r, ended_runs, now)
        if page * PAGE < total:
            next_url = "/inbox?" + urlencode({**query, "page": page + 1})
        if page > 1:
            prev_url = "/inbox?" + urlencode({**query, "page": page - 1})
    else:
        rows = reads.queue_page(who.key, where, _after(after), PAGE + 1, now)
        total = reads.queue_count(who.key, where, now)
        shown = _rows(r, rows[:PAGE], now)
        if len(rows) > PAGE:
            last = rows[PAGE - 1]
            after_key = f"{last.expires_at!r},{last.thread_id}"
            next_url = "/inbox?" + urlencode({**query, "after": after_key})
        if after is not None:
            prev_url = "/inbox?" + urlencode(query)  # keyset pages go back to the first
    context = {
        "who": who,
        "rows": shown,
        "total": total,
        "decided": decided,
        "outcomes": OUTCOMES,
        "outcome": where.outcome or "",
        "q": where.text or "",
        "workflows": reads.waiting_workflows(),
        "workflow": workflow or "",
        "escalated": bool(escalated),
        "mine": bool(mine),
        "paged": after is not None or page > 1,
        "next_url": next_url,
        "prev_url": prev_url,
    }
    return render(request, "queue.html", context)
