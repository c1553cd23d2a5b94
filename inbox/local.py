"""The embedded inbox: approval requests in a table of the worker's own database.

Reviewers answer from the command line (``python -m inbox``). Answering is a conditional UPDATE on
``status = 'pending'``, so two reviewers racing on one request cannot both win.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from agent.policy import separation_of_duties
from inbox import thread_id_from
from inbox.base import Approval
from inbox.events import answered_event
from inbox.hitl import validate_decisions
from inbox.outbox import Outbox, signer, webhook_url
from store.db import Database
from store.errors import UserError
from store.faults import fault
from store.runs import RunStore, append_event

INSERT_REQUEST = """
INSERT INTO inbox_requests (id, external_id, dedupe_key, title, description, request,
                            args_schemas, conversation, status, created_at, requested_by, quorum)
VALUES (:id, :external_id, :dedupe_key, :title, :description, :request, :args_schemas,
        :conversation, 'pending', :now, :requested_by, :quorum)
ON CONFLICT (dedupe_key) DO NOTHING
"""

ID_BY_DEDUPE_KEY = "SELECT id FROM inbox_requests WHERE dedupe_key = :dedupe_key"

GET_REQUEST = "SELECT * FROM inbox_requests WHERE id = :id"

GET_MANY_PG = "SELECT * FROM inbox_requests WHERE id = ANY(:ids)"

LIST_PENDING = "SELECT * FROM inbox_requests WHERE status = 'pending' ORDER BY created_at, id"

# The run's deadline is checked in the same UPDATE, so a late click cannot slip in between.
ANSWER = """
UPDATE inbox_requests SET status = 'answered', decisions = :decisions, decided_by = :decided_by,
       answered_at = :now
WHERE id = :id AND status = 'pending'
  AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.interrupt_id = :id AND runs.expires_at <= :now)
"""

# A request whose run expired or was cancelled can no longer be answered.
CLOSE = "UPDATE inbox_requests SET status = :status WHERE id = :id AND status = 'pending'"

# One row per distinct approver; the request is answered when their number meets its quorum.
ADD_APPROVAL = """
INSERT INTO inbox_approvals (request_id, reviewer, decisions, at)
SELECT :id, :decided_by, :decisions, :now
WHERE EXISTS (SELECT 1 FROM inbox_requests WHERE id = :id AND status = 'pending')
ON CONFLICT (request_id, reviewer) DO NOTHING
"""

APPROVALS = "SELECT * FROM inbox_approvals WHERE request_id = :id ORDER BY at, reviewer"

MARK_LADDER = "UPDATE inbox_requests SET ladder = :ladder WHERE id = :id AND status = 'pending'"

RUN_OF_REQUEST = """
SELECT thread_id, status, expires_at FROM runs WHERE interrupt_id = :id
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
        approvers=row["decided_by"].split(", ") if row.get("decided_by") else None,
        ladder=row.get("ladder"),
    )


class LocalInbox:
    """Approval requests stored next to the runs; implements :class:`inbox.base.Inbox`."""

    name = "local"
    enforces_duties = True  # open() takes quorum and requested_by; answer() enforces them

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
        quorum: int = 1,
        requested_by: str | None = None,
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
                    "quorum": quorum,
                    "requested_by": requested_by,
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
        if approval.status != "pending" or self._expired(interrupt_id):
            raise self._refuse_late(approval, decided_by)
        validate_decisions(approval.request, {"decisions": decisions}, approval.args_schemas)
        approving = any(d.get("type") in ("approve", "edit") for d in decisions)
        row = self.db.one(GET_REQUEST, {"id": interrupt_id})
        if approving and separation_of_duties() and row.get("requested_by") == decided_by:
            self._record(approval, decided_by, "decision refused", {"error": "self-approval"})
            raise UserError(
                f"{decided_by} requested this run and may not approve it "
                "(SEPARATION_OF_DUTIES=1); another reviewer must decide"
            )
        quorum = int(row.get("quorum") or 1)
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
            if approving and quorum > 1:
                names = self._add_approval(tx, approval, params, quorum)
                if len(names) < quorum:
                    return _approval(tx.one(GET_REQUEST, params))  # still pending
                params["decided_by"] = ", ".join(names)
            won = tx.execute(ANSWER, params) == 1
            current = _approval(tx.one(GET_REQUEST, params))
            if won:
                _record_answer(tx, current, now)
            if won and url:
                Outbox(self.db, self.clock).enqueue(tx, url, answered_event(current))
        if won:
            return current
        if current.answered:  # another reviewer answered between our read and our update
            raise UserError(already_answered(current))
        raise self._refuse_late(current, decided_by)  # the deadline passed in between

    def _add_approval(self, tx, approval: Approval, params: dict, quorum: int) -> list[str]:
        """Record one distinct approver (all of them must give the same decisions); return the
        approvers so far, in order."""
        if self._expired(approval.id):
            raise self._refuse_late(approval, params["decided_by"])
        if tx.execute(ADD_APPROVAL, params) != 1:
            raise UserError(
                f"{params['decided_by']} already approved request {approval.id}; it needs "
                f"{quorum} distinct approvers"
            )
        rows = tx.all(APPROVALS, params)
        for other in rows:
            if json.loads(other["decisions"]) != json.loads(params["decisions"]):
                raise UserError(
                    f"{other['reviewer']} approved request {approval.id} with other decisions "
                    f"({other['decisions']}); approvers of a quorum must agree"
                )
        names = [r["reviewer"] for r in rows]
        thread_id = thread_id_from(approval.external_id)
        if thread_id is not None:
            detail = {
                "interrupt_id": approval.id,
                "decisions": json.loads(params["decisions"]),
                "approvals": len(names),
                "quorum": quorum,
            }
            append_event(
                tx,
                thread_id,
                params["now"],
                f"inbox:{params['decided_by']}",
                "approval recorded",
                detail,
            )
        return names

    def _record(self, approval: Approval, decided_by: str, reason: str, detail: dict) -> None:
        thread_id = thread_id_from(approval.external_id)
        if thread_id is not None:
            RunStore(self.db, self.clock).record(
                thread_id, f"inbox:{decided_by}", reason, {"interrupt_id": approval.id, **detail}
            )

    def mark_ladder(self, interrupt_id: str, step: str) -> None:
        """Show on the request that it was reminded or escalated (``python -m inbox list``)."""
        self.db.execute(MARK_LADDER, {"id": interrupt_id, "ladder": step})

    def close(self, interrupt_id: str, status: str) -> bool:
        """Close a pending request (``expired``/``cancelled``) so nobody can answer it."""
        return self.db.execute(CLOSE, {"id": interrupt_id, "status": status}) == 1

    def _expired(self, interrupt_id: str) -> bool:
        row = self.db.one(RUN_OF_REQUEST, {"id": interrupt_id})
        return bool(row and row["expires_at"] is not None and row["expires_at"] <= self.clock())

    def _refuse_late(self, approval: Approval, decided_by: str) -> UserError:
        """Record the refused attempt on the run's audit trail, and say why to the reviewer."""
        row = self.db.one(RUN_OF_REQUEST, {"id": approval.id})
        if row is None:
            return UserError(f"request {approval.id} is {approval.status}; it cannot be answered")
        RunStore(self.db, self.clock).record(
            row["thread_id"],
            f"inbox:{decided_by}",
            "late decision refused" if row["status"] != "cancelled" else "decision refused",
            {"interrupt_id": approval.id, "decided_by": decided_by, "run_status": row["status"]},
        )
        if row["status"] == "cancelled":
            return UserError(f"request {approval.id} was cancelled; it cannot be answered")
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(row["expires_at"] or 0))
        return UserError(
            f"request {approval.id} expired at {when}; a decision is no longer accepted "
            "(start a new run if the action is still wanted)"
        )


def _record_answer(tx, approval: Approval, now: float) -> None:
    """The reviewer's decision on the run's audit trail, with who and when (the claim that
    applies it comes later, from whichever process wins it)."""
    thread_id = thread_id_from(approval.external_id)
    if thread_id is not None:
        detail = {"interrupt_id": approval.id, "decisions": approval.decisions}
        append_event(
            tx, thread_id, now, f"inbox:{approval.decided_by}", "decision recorded", detail
        )


def already_answered(approval: Approval) -> str:
    kinds = ", ".join(sorted({d["type"] for d in approval.decisions or []}))
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(approval.answered_at or 0))
    return (
        f"request {approval.id} was already answered ({kinds} by {approval.decided_by} at {when}); "
        "a decision cannot be changed"
    )
