"""The embedded inbox: approval requests kept in the worker's own database.

It is a view, not a rule book. A pause opens a copy of the request here; reviewers read it with
``python -m inbox`` or the web pages and decide through the worker's one decision path
(:mod:`worker.decisions`), which records approvals in the one approvals table and closes this copy
in the same transaction as the run's claim, expiry or cancellation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from core.faults import fault
from core.hitl import HitlRequest
from inbox.base import Approval, Rules
from inbox.duties import approving
from store.db import Store
from store.inbox_requests import InboxRequest
from store.tables import Tables


def _approval(row: InboxRequest, approvers: list[str]) -> Approval:
    """``approvers``: the quorum's so far; a request ended by a reject or respond shows who
    gave that instead."""
    if row.decided_by and (not approvers or (row.decisions and not approving(row.decisions))):
        approvers = [row.decided_by]
    return Approval(
        id=row.id,
        external_id=row.external_id,
        title=row.title,
        description=row.description,
        request=row.request,
        args_schemas=row.args_schemas,
        status=row.status,
        decisions=row.decisions,
        created_at=row.created_at,
        answered_at=row.answered_at,
        approvers=approvers,
        conversation=row.conversation,
        ladder=row.ladder,
        quorum=row.quorum,
        digest=row.request.digest() if row.request.actions else None,
    )


class LocalInbox:
    """Approval requests stored next to the runs; implements :class:`inbox.base.Inbox`."""

    name = "local"

    def __init__(self, tables: Tables, clock: Callable[[], float] = time.time):
        self.tables = tables
        self.clock = clock
        self.requests = tables.inbox_requests()

    def beside(self, store: Store) -> bool:
        """Whether these requests live in ``store``'s own database, next to its runs (then
        the decision path answers them, and one join finds what it has not)."""
        return store.tables == self.tables

    def open(
        self,
        *,
        external_id: str,
        dedupe_key: str,
        title: str,
        description: str,
        request: HitlRequest,
        args_schemas: dict[str, Any],
        conversation: list[dict[str, Any]] | None = None,
        rules: Rules | None = None,
    ) -> str:
        """Idempotent per ``dedupe_key``: a retried segment gets the same request back."""
        rules = rules or Rules()
        return self.requests.open(
            request,
            {
                "id": str(uuid.uuid4()),
                "external_id": external_id,
                "dedupe_key": dedupe_key,
                "title": title,
                "description": description,
                "args_schemas": args_schemas,
                "conversation": conversation,
                "now": self.clock(),
                "quorum": rules.quorum,
                "requested_by": rules.requested_by,
                "separation": rules.separation,
                "expires_at": rules.expires_at,
            },
            lambda: fault("inbox.write"),
        )

    def get(self, interrupt_id: str) -> Approval | None:
        row = self.requests.get(interrupt_id)
        return None if row is None else _approval(row, self.requests.approvers(row.id))

    def get_many(self, interrupt_ids: list[str]) -> dict[str, Approval]:
        """The answered ones carry their approvers (a request answered before the one decision
        path existed: the sweep decides it as a source)."""
        rows = self.requests.get_many(interrupt_ids)
        return {
            r.id: _approval(r, self.requests.approvers(r.id) if r.status == "answered" else [])
            for r in rows
        }

    def pending(self) -> list[Approval]:
        """Open requests of runs that still wait, oldest first."""
        return [_approval(r, self.requests.approvers(r.id)) for r in self.requests.pending()]

    def mark_ladder(self, interrupt_id: str, step: str) -> None:
        """Show on the request that it was reminded or escalated (``python -m inbox list``)."""
        self.requests.mark_ladder(interrupt_id, step)

    def close(self, interrupt_id: str, status: str) -> bool:
        """Already done: the run's expiry or cancellation closed this copy in its transaction."""
        return True

    def shutdown(self) -> None:
        """Nothing to release: the inbox uses the worker's own store."""
