"""The local inbox's copies of approval requests (``inbox_requests``): what reviewers read in
``python -m inbox`` and on the pages. Decisions are not made here: the run's transitions close a
copy (``store.runs``) and approvals live in ``run_approvals`` (``store.approvals``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.hitl import HitlRequest
from store.db import Database, Tx

INSERT_REQUEST = """
INSERT INTO inbox_requests (id, external_id, dedupe_key, title, description, request,
                            args_schemas, conversation, status, created_at, requested_by, quorum,
                            separation, expires_at)
VALUES (:id, :external_id, :dedupe_key, :title, :description, :request, :args_schemas,
        :conversation, 'pending', :now, :requested_by, :quorum, :separation, :expires_at)
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING id
"""

ID_BY_DEDUPE_KEY = "SELECT id FROM inbox_requests WHERE dedupe_key = :dedupe_key"

GET_REQUEST = "SELECT * FROM inbox_requests WHERE id = :id"

# Open requests of runs that still wait on them.
LIST_PENDING = """
SELECT i.* FROM inbox_requests i JOIN runs r ON r.interrupt_id = i.id
WHERE i.status = 'pending' AND r.status = 'waiting'
ORDER BY i.created_at, i.id
"""

MARK_LADDER = "UPDATE inbox_requests SET ladder = :ladder WHERE id = :id AND status = 'pending'"

# Approvers so far of a request (interrupt ids are unique across runs).
APPROVERS = "SELECT reviewer FROM run_approvals WHERE interrupt_id = :id ORDER BY at, reviewer_key"


@dataclass(frozen=True)
class InboxRequest:
    id: str
    external_id: str
    title: str
    description: str
    request: HitlRequest
    args_schemas: dict[str, Any]
    status: str  # pending | answered | expired | cancelled
    decisions: list[dict[str, Any]] | None
    decided_by: str | None
    created_at: float
    answered_at: float | None
    conversation: list[dict[str, Any]] | None
    ladder: str | None
    quorum: int


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def _request(row: dict[str, Any]) -> InboxRequest:
    return InboxRequest(
        id=row["id"],
        external_id=row["external_id"],
        title=row["title"],
        description=row["description"],
        request=HitlRequest.parse(json.loads(row["request"])),
        args_schemas=json.loads(row["args_schemas"]),
        status=row["status"],
        decisions=_loads(row["decisions"]),
        decided_by=row["decided_by"],
        created_at=row["created_at"],
        answered_at=row["answered_at"],
        conversation=_loads(row.get("conversation")),
        ladder=row.get("ladder"),
        quorum=int(row.get("quorum") or 1),
    )


class InboxRequests:
    def __init__(self, db: Database):
        self.db = db

    def insert(self, tx: Tx, request: HitlRequest, values: dict[str, Any]) -> str:
        """Idempotent per ``dedupe_key``: the id of the new request, or of the one already
        there (a retried segment gets the same request back)."""
        row = {
            **values,
            "request": json.dumps(request.to_json()),
            "args_schemas": json.dumps(values["args_schemas"]),
            "conversation": _dumps(values.get("conversation")),
            "separation": int(bool(values.get("separation"))),
        }
        inserted = tx.returning(INSERT_REQUEST, row)
        if inserted is not None:
            return str(inserted["id"])
        return str(tx.row(ID_BY_DEDUPE_KEY, {"dedupe_key": values["dedupe_key"]})["id"])

    def open(
        self, request: HitlRequest, values: dict[str, Any], before_commit: Callable[[], None]
    ) -> str:
        """:meth:`insert` in a transaction of its own; ``before_commit`` runs inside it (the
        caller's fault seam: a crash there leaves no request)."""
        with self.db.transaction() as tx:
            request_id = self.insert(tx, request, values)
            before_commit()
            return request_id

    def get(self, request_id: str) -> InboxRequest | None:
        row = self.db.one(GET_REQUEST, {"id": request_id})
        return None if row is None else _request(row)

    def get_many(self, request_ids: list[str]) -> list[InboxRequest]:
        """One query per 500 ids (SQLite's parameter limit; Postgres takes them as one
        array), so a sweep's statement count does not grow with the runs still waiting."""
        rows: list[dict[str, Any]] = []
        for start in range(0, len(request_ids), 500):
            chunk = request_ids[start : start + 500]
            if self.db.backend == "postgres":
                sql = "SELECT * FROM inbox_requests WHERE id = ANY(:ids) ORDER BY id"
                rows += self.db.all(sql, {"ids": chunk})
                continue
            params = {f"id{i}": v for i, v in enumerate(chunk)}
            marks = ", ".join(f":id{i}" for i in range(len(chunk)))
            rows += self.db.all(f"SELECT * FROM inbox_requests WHERE id IN ({marks})", params)
        return [_request(r) for r in rows]

    def pending(self) -> list[InboxRequest]:
        return [_request(r) for r in self.db.all(LIST_PENDING)]

    def approvers(self, request_id: str) -> list[str]:
        return [r["reviewer"] for r in self.db.all(APPROVERS, {"id": request_id})]

    def mark_ladder(self, request_id: str, ladder: str) -> None:
        self.db.execute(MARK_LADDER, {"id": request_id, "ladder": ladder})


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value)
