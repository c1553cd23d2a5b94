"""The embedded inbox: approval requests in a table of the worker's own database.

Reviewers answer from the command line (``python -m inbox``). Answering is a conditional UPDATE on
``status = 'pending'``, so two reviewers racing on one request cannot both win.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from inbox.base import Approval
from inbox.events import answered_event
from inbox.hitl import validate_decisions
from inbox.outbox import Outbox, signer, webhook_url
from store.db import Database
from store.errors import UserError
from store.faults import fault

INSERT_REQUEST = """
INSERT INTO inbox_requests (id, external_id, dedupe_key, title, description, request,
                            args_schemas, conversation, status, created_at)
VALUES (:id, :external_id, :dedupe_key, :title, :description, :request, :args_schemas,
        :conversation, 'pending', :now)
ON CONFLICT (dedupe_key) DO NOTHING
"""

ID_BY_DEDUPE_KEY = "SELECT id FROM inbox_requests WHERE dedupe_key = :dedupe_key"

GET_REQUEST = "SELECT * FROM inbox_requests WHERE id = :id"

GET_MANY_PG = "SELECT * FROM inbox_requests WHERE id = ANY(:ids)"

LIST_PENDING = "SELECT * FROM inbox_requests WHERE status = 'pending' ORDER BY created_at, id"

ANSWER = """
UPDATE inbox_requests SET status = 'answered', decisions = :decisions, decided_by = :decided_by,
       answered_at = :now
WHERE id = :id AND status = 'pending'
"""


def _approval(row: dict[str, Any]) -> Approval:
    return Approval(
        id=row["id"],
        external_id=row["external_id"],
        title=row["title"],
        description=row["description"],
        request=json.loads(row["request"]),
        args_schemas=json.loads(row["args_schemas"]),
        status=row["status"],
        decisions=None if row["decisions"] is None else json.loads(row["decisions"]),
        decided_by=row["decided_by"],
        created_at=row["created_at"],
        answered_at=row["answered_at"],
        conversation=None if row.get("conversation") is None else json.loads(row["conversation"]),
    )


class LocalInbox:
    """Approval requests stored next to the runs; implements :class:`inbox.base.Inbox`."""

    name = "local"

    def __init__(self, db: Database, clock=time.time):
        self.db = db
        self.clock = clock

    def open(
        self,
        *,
        external_id: str,
        dedupe_key: str,
        title: str,
        description: str,
        request: dict,
        args_schemas: dict,
        conversation: list[dict] | None = None,
    ) -> str:
        """Idempotent per ``dedupe_key``: a retried segment gets the same request back.

        The conversation is not kept: reviewers here read the request on the command line."""
        with self.db.transaction() as tx:
            tx.execute(
                INSERT_REQUEST,
                {
                    "id": str(uuid.uuid4()),
                    "external_id": external_id,
                    "dedupe_key": dedupe_key,
                    "title": title,
                    "description": description,
                    "request": json.dumps(request),
                    "args_schemas": json.dumps(args_schemas),
                    "conversation": None if conversation is None else json.dumps(conversation),
                    "now": self.clock(),
                },
            )
            fault("inbox.write")
            return tx.one(ID_BY_DEDUPE_KEY, {"dedupe_key": dedupe_key})["id"]

    def get(self, interrupt_id: str) -> Approval | None:
        row = self.db.one(GET_REQUEST, {"id": interrupt_id})
        return None if row is None else _approval(row)

    def get_many(self, interrupt_ids: list[str]) -> dict[str, Approval]:
        """One query (Postgres: an array parameter) or one per 500 ids (SQLite's parameter
        limit), so a sweep's statement count does not grow with the runs still waiting."""
        found: dict[str, Approval] = {}
        if self.db.backend == "postgres":
            rows = self.db.all(GET_MANY_PG, {"ids": list(interrupt_ids)}) if interrupt_ids else []
            found.update((r["id"], _approval(r)) for r in rows)
            return found
        for start in range(0, len(interrupt_ids), 500):
            chunk = interrupt_ids[start : start + 500]
            params = {f"id{i}": v for i, v in enumerate(chunk)}
            marks = ", ".join(f":id{i}" for i in range(len(chunk)))
            rows = self.db.all(f"SELECT * FROM inbox_requests WHERE id IN ({marks})", params)
            found.update((r["id"], _approval(r)) for r in rows)
        return found

    def pending(self) -> list[Approval]:
        return [_approval(r) for r in self.db.all(LIST_PENDING)]

    def answer(self, interrupt_id: str, decisions: list[dict], decided_by: str) -> Approval:
        """Record a reviewer's decisions once; refuse unknown, invalid or already answered ones."""
        approval = self.get(interrupt_id)
        if approval is None:
            raise UserError(
                f"no approval request with id {interrupt_id!r}; "
                "`uv run python -m inbox list` shows the pending ones"
            )
        if approval.answered:
            raise UserError(already_answered(approval))
        validate_decisions(approval.request, {"decisions": decisions}, approval.args_schemas)
        url = webhook_url()
        if url:
            signer()  # refuse before answering if the delivery could never be signed
        now = self.clock()
        with self.db.transaction() as tx:
            params = {
                "id": interrupt_id,
                "decisions": json.dumps(decisions),
                "decided_by": decided_by,
                "now": now,
            }
            if tx.execute(ANSWER, params) != 1:
                # another reviewer answered between our read and our update
                raise UserError(already_answered(_approval(tx.one(GET_REQUEST, params))))
            answered = _approval(tx.one(GET_REQUEST, params))
            if url:
                Outbox(self.db, self.clock).enqueue(tx, url, answered_event(answered))
        return answered


def already_answered(approval: Approval) -> str:
    kinds = ", ".join(sorted({d["type"] for d in approval.decisions or []}))
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(approval.answered_at or 0))
    return (
        f"request {approval.id} was already answered ({kinds} by {approval.decided_by} at {when}); "
        "a decision cannot be changed"
    )
