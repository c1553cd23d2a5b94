"""Approvals given toward a run's quorum through the API or the web inbox: one row per reviewer
(by normalised name) and pause, so a quorum counts people, not requests.
"""

from __future__ import annotations

import json
import time
from typing import Any

from store.db import Database
from store.runs import append_event
from store.states import Event

# Approvals given through the API toward a quorum: one row per reviewer (normalised name).
ADD_APPROVAL = """
INSERT INTO run_approvals (thread_id, interrupt_id, reviewer_key, reviewer, decisions, at)
VALUES (:thread_id, :interrupt_id, :reviewer_key, :reviewer, :decisions, :now)
ON CONFLICT (thread_id, interrupt_id, reviewer_key) DO NOTHING
"""

LIST_APPROVALS = """
SELECT reviewer, decisions FROM run_approvals
WHERE thread_id = :thread_id AND interrupt_id = :interrupt_id ORDER BY at, reviewer_key
"""


class RunApprovals:
    def __init__(self, db: Database, clock=time.time):
        self.db = db
        self.clock = clock

    def add_approval(
        self, thread_id: str, interrupt_id: str, reviewer: str, decisions: list[dict], key: str
    ) -> list[dict[str, Any]] | None:
        """Record one reviewer's approval toward the run's quorum (with its audit event); None
        if that reviewer (by ``key``, the normalised name) already approved. Returns every
        approval so far, oldest first."""
        now = self.clock()
        params = {"thread_id": thread_id, "interrupt_id": interrupt_id, "reviewer": reviewer}
        with self.db.transaction() as tx:
            added = tx.execute(
                ADD_APPROVAL,
                {**params, "reviewer_key": key, "decisions": json.dumps(decisions), "now": now},
            )
            if added != 1:
                return None
            rows = tx.all(LIST_APPROVALS, params)
            detail = {"interrupt_id": interrupt_id, "decisions": decisions, "approvals": len(rows)}
            append_event(tx, thread_id, now, f"api:{reviewer}", Event.APPROVAL_RECORDED, detail)
        return rows

    def approvals(self, thread_id: str, interrupt_id: str) -> list[dict[str, Any]]:
        """Approvals recorded toward the quorum of this pause (``decisions`` parsed)."""
        params = {"thread_id": thread_id, "interrupt_id": interrupt_id}
        rows = self.db.all(LIST_APPROVALS, params)
        return [{**r, "decisions": json.loads(r["decisions"])} for r in rows]
