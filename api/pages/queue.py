"""The queue page: waiting runs, most urgent first, keyset-paged 50 at a time, with filters.

Reviewers and operators see every waiting run; a requester sees only their own, read-only. The
SQL is in :mod:`store.queue`; here rows become what a person scans: a summary of the proposed
actions, the amount, how long it has waited, the deadline, reminder/escalation marks and quorum
progress.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api.pages.session import render, runner, to_login, viewer
from inbox.hitl import HitlRequest
from store.queue import PAGE, QueueFilter, queue_page, waiting_workflows

router = APIRouter()


def summary(request: HitlRequest | dict | None) -> tuple[str, str]:
    """The proposed actions in one line, and the amount they move (if any)."""
    parts, amounts = [], []
    for action in HitlRequest.parse(request).actions:
        args = action.args
        shown = ", ".join(f"{k}={v}" for k, v in list(args.items())[:3] if k != "amount")
        parts.append(f"{action.name}({shown})")
        amount = args.get("amount")
        if isinstance(amount, int | float):
            amounts.append(float(amount))
    return "; ".join(parts), (f"{sum(amounts):,.2f}" if amounts else "")


def _after(raw: str | None) -> tuple[float, str] | None:
    """``?after=<expires_at>,<thread_id>``; anything unparsable starts from the top."""
    if not raw or "," not in raw:
        return None
    at, _, thread_id = raw.partition(",")
    try:
        return float(at), thread_id
    except ValueError:
        return None


def _row(row: dict[str, Any], now: float) -> dict[str, Any]:
    actions, amount = summary(row["request"])
    return {
        "thread_id": row["thread_id"],
        "workflow": row["workflow"],
        "actions": actions,
        "amount": amount,
        "requested_by": row["requested_by"] or "",
        "waiting": now - row["updated_at"],
        "expires_at": row["expires_at"],
        "left": row["expires_at"] - now,
        "mark": {1: "reminded", 2: "escalated"}.get(row["ladder_step"], ""),
        "approvals": row["approvals"],
        "quorum": row["quorum"] or 1,
    }


@router.get("/inbox")
def queue(
    request: Request,
    workflow: str | None = None,
    escalated: str | None = None,
    mine: str | None = None,
    after: str | None = None,
) -> Response:
    who = viewer(request)
    if who is None:
        return to_login(request)
    where = QueueFilter(
        workflow=workflow or None,
        escalated=bool(escalated),
        waiting_on_me=bool(mine) and who.sees_all,
        requested_by=None if who.sees_all else who.key,
    )
    db = runner(request).store.db
    rows = queue_page(db, who.key, where, _after(after), PAGE + 1)
    now = time.time()
    shown = [_row(r, now) for r in rows[:PAGE]]
    next_url = None
    if len(rows) > PAGE:
        last = rows[PAGE - 1]
        query = {"workflow": workflow or "", "escalated": escalated or "", "mine": mine or ""}
        query = {k: v for k, v in query.items() if v}
        query["after"] = f"{last['expires_at']!r},{last['thread_id']}"
        next_url = "/inbox?" + urlencode(query)
    context = {
        "who": who,
        "rows": shown,
        "workflows": waiting_workflows(db),
        "workflow": workflow or "",
        "escalated": bool(escalated),
        "mine": bool(mine),
        "paged": after is not None,
        "next_url": next_url,
    }
    return render(request, "queue.html", context)
