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

import time
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api.pages.session import Viewer, render, runner, to_login, viewer
from inbox.views import ActionView, money
from store.delegations import Delegations
from store.queue import (
    PAGE,
    Eligible,
    QueueFilter,
    decided_page,
    queue_count,
    queue_page,
    waiting_workflows,
)
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


def _rows(r: Runner, rows: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """The page's rows, the workflows' reads shared across them (one ledger read per order)."""
    with r.graphs.reading_many({row["workflow"] for row in rows}):
        return [_row(r, row, now) for row in rows]


def _row(r: Runner, row: dict[str, Any], now: float) -> dict[str, Any]:
    actions, amount = summary(r.graphs.views(row["workflow"], row["request"]))
    return {
        "thread_id": row["thread_id"],
        "workflow": row["workflow"],
        "actions": actions,
        "amount": amount,
        "requested_by": row["requested_by"] or "",
        "waiting": now - row["updated_at"],
        "updated_at": row["updated_at"],
        "expires_at": row.get("expires_at"),
        "left": (row.get("expires_at") or now) - now,
        "mark": {1: "reminded", 2: "escalated"}.get(row.get("ladder_step") or 0, ""),
        "approvals": row.get("approvals") or 0,
        "quorum": row.get("quorum") or 1,
        "status": row.get("status", "waiting"),
        "result": row.get("result") or "",
    }


def principals_of(request: Request, who: Viewer) -> tuple[Eligible, ...]:
    """Whom the viewer may decide as ("waiting on me" follows the authority matrix): themselves
    with their groups, and each person who delegated to them, with the groups lent."""
    lent = Delegations(runner(request).store.db)
    return principals(who.name, frozenset(who.groups), lent)


OUTCOMES = ("done", "expired", "cancelled", "failed", "resuming", "running")


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
    db = r.store.db
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
        rows, total = decided_page(db, who.key, where, (page - 1) * PAGE, PAGE)
        shown = _rows(r, rows, now)
        if page * PAGE < total:
            next_url = "/inbox?" + urlencode({**query, "page": page + 1})
        if page > 1:
            prev_url = "/inbox?" + urlencode({**query, "page": page - 1})
    else:
        rows = queue_page(db, who.key, where, _after(after), PAGE + 1)
        total = queue_count(db, who.key, where)
        shown = _rows(r, rows[:PAGE], now)
        if len(rows) > PAGE:
            last = rows[PAGE - 1]
            after_key = f"{last['expires_at']!r},{last['thread_id']}"
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
        "workflows": waiting_workflows(db),
        "workflow": workflow or "",
        "escalated": bool(escalated),
        "mine": bool(mine),
        "paged": after is not None or page > 1,
        "next_url": next_url,
        "prev_url": prev_url,
    }
    return render(request, "queue.html", context)
