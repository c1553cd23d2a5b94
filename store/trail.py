"""The audit trail's writer: every event is a row of ``run_events`` written in the caller's
transaction, so the trail has it exactly when the fact it records was committed (a transition,
a receipt, an approval counted, a delivery seen), chained to the run's previous event
(``store.audit``).
"""

from __future__ import annotations

from typing import Any

from core import exactjson
from store import audit
from store.db import Tx


def append_event(tx: Tx, thread_id: str, at: float, actor: str, reason: str, detail: Any) -> None:
    """An audit event written in the caller's transaction (a receipt, an inbox answer), so the
    trail has it exactly when the fact it records was committed."""
    event(tx, thread_id, at, actor, None, None, reason, detail)


def event(
    tx: Tx,
    thread_id: str,
    at: float,
    actor: str,
    from_status: str | None,
    to_status: str | None,
    reason: str,
    detail: Any,
    head: audit.Head | None = None,
) -> None:
    audit.append(
        tx,
        {
            "thread_id": thread_id,
            "at": at,
            "actor": actor,
            "from_status": from_status,
            "to_status": to_status,
            "reason": reason,
            "detail": None if detail is None else exactjson.dumps(detail),
        },
        head,
    )
