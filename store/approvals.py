"""The one approvals table: approvals given toward a run's quorum, whatever their source (the
API, the web inbox, the inbox CLI, a webhook, a polled inbox). One row per reviewer (by
normalised name) and pause, so a quorum counts people, not requests or channels.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core import exactjson
from store.db import Database
from store.runs import Within
from store.states import Event
from store.trail import append_event

ADD_APPROVAL = """
INSERT INTO run_approvals (thread_id, interrupt_id, reviewer_key, reviewer, decisions, at,
                           actor_key)
VALUES (:thread_id, :interrupt_id, :reviewer_key, :reviewer, :decisions, :now, :actor_key)
ON CONFLICT (thread_id, interrupt_id, reviewer_key) DO NOTHING
"""

LIST_APPROVALS = """
SELECT reviewer, reviewer_key, decisions, at, actor_key FROM run_approvals
WHERE thread_id = :thread_id AND interrupt_id = :interrupt_id ORDER BY at, reviewer_key
"""


CLEAR_APPROVALS = """
DELETE FROM run_approvals WHERE thread_id = :thread_id AND interrupt_id = :interrupt_id
"""


@dataclass(frozen=True)
class Approval:
    """One reviewer's approval toward a pause's quorum."""

    reviewer: str
    key: str  # the normalised name the quorum counts by: whose authority approved
    decisions: list[dict[str, Any]]
    at: float
    actor: str = ""  # who acted (a delegate acting for ``key``); the same as ``key`` otherwise

    @property
    def fingerprint(self) -> str:
        """Names the decisions approved, so "approve bob's changes" approves exactly those."""
        return fingerprint(self.decisions)

    @property
    def people(self) -> set[str]:
        """Whom this approval takes up in a quorum: the principal and the person acting."""
        return {self.key, self.actor or self.key}


def fingerprint(decisions: list[dict[str, Any]]) -> str:
    return hashlib.sha256(exactjson.dumps(decisions, sort_keys=True).encode()).hexdigest()[:16]


def _approval(row: dict[str, Any]) -> Approval:
    key = row["reviewer_key"]
    decisions = exactjson.loads(row["decisions"])
    return Approval(row["reviewer"], key, decisions, row["at"], row.get("actor_key") or key)


class RunApprovals:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db = db
        self.clock = clock

    def add(
        self,
        thread_id: str,
        interrupt_id: str,
        reviewers: dict[str, str],
        decisions: list[dict[str, Any]],
        *,
        source: str,
        quorum: int,
        restart: bool = False,
        actors: dict[str, str] | None = None,
        within: Within | None = None,
    ) -> list[Approval]:
        """Record each reviewer (normalised key -> name) who has not approved yet, with an
        audit event each, in one transaction; return every approval so far, oldest first.
        ``restart``: a counter-proposal; the approvals so far are withdrawn first (the audit
        trail keeps them). ``actors``: who acted for a key, where that is someone else (a
        delegate). ``within``: the caller's writes committed with them."""
        now = self.clock()
        params = {"thread_id": thread_id, "interrupt_id": interrupt_id}
        with self.db.transaction() as tx:
            if restart:
                withdrawn = [r["reviewer"] for r in tx.all(LIST_APPROVALS, params)]
                tx.execute(CLEAR_APPROVALS, params)
                detail = {"interrupt_id": interrupt_id, "withdrawn": withdrawn, "restart": True}
                actor = f"{source}:{', '.join(reviewers.values())}"
                append_event(tx, thread_id, now, actor, Event.APPROVAL_RECORDED, detail)
            for key, reviewer in reviewers.items():
                added = tx.execute(
                    ADD_APPROVAL,
                    {
                        **params,
                        "reviewer_key": key,
                        "reviewer": reviewer,
                        "decisions": exactjson.dumps(decisions),
                        "now": now,
                        "actor_key": (actors or {}).get(key, key),
                    },
                )
                if added != 1:
                    continue
                count = len(tx.all(LIST_APPROVALS, params))
                detail = {
                    "interrupt_id": interrupt_id,
                    "decisions": decisions,
                    "approvals": count,
                    "quorum": quorum,
                    "source": source,
                }
                actor = f"{source}:{reviewer}"
                append_event(tx, thread_id, now, actor, Event.APPROVAL_RECORDED, detail)
            rows = tx.all(LIST_APPROVALS, params)
            if within is not None:
                within(tx)
        return [_approval(r) for r in rows]

    def list(self, thread_id: str, interrupt_id: str) -> list[Approval]:
        """Approvals recorded toward the quorum of this pause, oldest first."""
        params = {"thread_id": thread_id, "interrupt_id": interrupt_id}
        return [_approval(r) for r in self.db.all(LIST_APPROVALS, params)]
