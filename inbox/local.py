"""The embedded inbox: approval requests in a table of the worker's own database.

Reviewers answer from the command line (``python -m inbox``). Answering is a conditional UPDATE on
``status = 'pending'`` that also checks the request's own deadline, so two reviewers racing on one
request cannot both win and a late click cannot slip in. Each approver is a row of
``inbox_approvals``; a quorum request is answered when enough distinct ones agree. The inbox keeps
its own copy of the rules the worker fixed at the pause and never reads the ``runs`` table.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from core.errors import UserError
from core.faults import fault
from inbox import thread_id_from
from inbox.base import Approval, Rules
from inbox.duties import approving, check
from inbox.events import answered_event
from inbox.hitl import validate_decisions
from inbox.outbox import Outbox, signer, webhook_url
from store.db import Database, Tx
from store.runs import append_event
from store.states import Event

INSERT_REQUEST = """
INSERT INTO inbox_requests (id, external_id, dedupe_key, title, description, request,
                            args_schemas, conversation, status, created_at, requested_by, quorum,
                            separation, expires_at)
VALUES (:id, :external_id, :dedupe_key, :title, :description, :request, :args_schemas,
        :conversation, 'pending', :now, :requested_by, :quorum, :separation, :expires_at)
ON CONFLICT (dedupe_key) DO NOTHING
"""

ID_BY_DEDUPE_KEY = "SELECT id FROM inbox_requests WHERE dedupe_key = :dedupe_key"

GET_REQUEST = "SELECT * FROM inbox_requests WHERE id = :id"

LIST_PENDING = "SELECT * FROM inbox_requests WHERE status = 'pending' ORDER BY created_at, id"

# The deadline is checked in the same UPDATE, so a late click cannot slip in between.
ANSWER = """
UPDATE inbox_requests SET status = 'answered', decisions = :decisions, decided_by = :decided_by,
       answered_at = :now
WHERE id = :id AND status = 'pending' AND (expires_at IS NULL OR expires_at > :now)
RETURNING *
"""

# An answered approval whose edit needs a larger quorum: pending again, the approval kept.
REOPEN = """
UPDATE inbox_requests SET status = 'pending', quorum = :quorum, decisions = NULL,
       decided_by = NULL, answered_at = NULL
WHERE id = :id AND status = 'answered' AND quorum < :quorum
"""

# A request whose run expired or was cancelled can no longer be answered.
CLOSE = "UPDATE inbox_requests SET status = :status WHERE id = :id AND status = 'pending'"

# One row per distinct approver; the request is answered when their number meets its quorum.
ADD_APPROVAL = """
INSERT INTO inbox_approvals (request_id, reviewer, decisions, at)
SELECT :id, :reviewer, :decisions, :now
WHERE EXISTS (SELECT 1 FROM inbox_requests WHERE id = :id AND status = 'pending')
ON CONFLICT (request_id, reviewer) DO NOTHING
"""

APPROVALS = "SELECT * FROM inbox_approvals WHERE request_id = :id ORDER BY at, reviewer"

MARK_LADDER = "UPDATE inbox_requests SET ladder = :ladder WHERE id = :id AND status = 'pending'"


def _approval(row: dict[str, Any], approvals: list[dict[str, Any]]) -> Approval:
    decisions = None if row["decisions"] is None else json.loads(row["decisions"])
    if approvals and (decisions is None or approving(decisions)):
        names = [a["reviewer"] for a in approvals]  # so far, while it is pending
    else:
        names = [row["decided_by"]] if row["decided_by"] else []
    return Approval(
        id=row["id"],
        external_id=row["external_id"],
        title=row["title"],
        description=row["description"],
        request=json.loads(row["request"]),
        args_schemas=json.loads(row["args_schemas"]),
        status=row["status"],
        decisions=decisions,
        created_at=row["created_at"],
        answered_at=row["answered_at"],
        approvers=names,
        conversation=None if row.get("conversation") is None else json.loads(row["conversation"]),
        ladder=row.get("ladder"),
    )


def _stamp(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at or 0))


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
        rules: Rules | None = None,
    ) -> str:
        """Idempotent per ``dedupe_key``: a retried segment gets the same request back."""
        rules = rules or Rules()
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
                    "quorum": rules.quorum,
                    "requested_by": rules.requested_by,
                    "separation": int(rules.separation),
                    "expires_at": rules.expires_at,
                },
            )
            fault("inbox.write")
            return tx.row(ID_BY_DEDUPE_KEY, {"dedupe_key": dedupe_key})["id"]

    def _load(self, tx: Tx, row: dict[str, Any] | None) -> Approval | None:
        return None if row is None else _approval(row, tx.all(APPROVALS, {"id": row["id"]}))

    def get(self, interrupt_id: str) -> Approval | None:
        with self.db.transaction() as tx:
            return self._load(tx, tx.one(GET_REQUEST, {"id": interrupt_id}))

    def get_many(self, interrupt_ids: list[str]) -> dict[str, Approval]:
        """One query per 500 ids (SQLite's parameter limit; Postgres takes them as one array),
        plus one for the approvers of the answered ones, so a sweep's statement count does not
        grow with the runs still waiting."""
        rows: list[dict[str, Any]] = []
        for start in range(0, len(interrupt_ids), 500):
            rows += self._rows("inbox_requests", "id", interrupt_ids[start : start + 500])
        answered = [r["id"] for r in rows if r["status"] == "answered"]
        approvals: dict[str, list[dict[str, Any]]] = {}
        for a in self._rows("inbox_approvals", "request_id", answered) if answered else []:
            approvals.setdefault(a["request_id"], []).append(a)
        return {r["id"]: _approval(r, approvals.get(r["id"], [])) for r in rows}

    def _rows(self, table: str, column: str, ids: list[str]) -> list[dict[str, Any]]:
        if not ids:
            return []
        if self.db.backend == "postgres":
            sql = f"SELECT * FROM {table} WHERE {column} = ANY(:ids)"
            return self.db.all(sql + " ORDER BY 1", {"ids": list(ids)})
        params = {f"id{i}": v for i, v in enumerate(ids)}
        marks = ", ".join(f":id{i}" for i in range(len(ids)))
        return self.db.all(f"SELECT * FROM {table} WHERE {column} IN ({marks})", params)

    def pending(self) -> list[Approval]:
        with self.db.transaction() as tx:
            return [a for r in tx.all(LIST_PENDING) if (a := self._load(tx, r)) is not None]

    def quorum_progress(self, interrupt_id: str) -> tuple[list[str], int]:
        """Who approved so far, and how many distinct approvers the request needs."""
        row = self.db.one(GET_REQUEST, {"id": interrupt_id})
        names = [r["reviewer"] for r in self.db.all(APPROVALS, {"id": interrupt_id})]
        return names, int(row["quorum"] or 1) if row else 1

    def answer(self, interrupt_id: str, decisions: list[dict], decided_by: str) -> Approval:
        """Record a reviewer's decisions once; refuse unknown, invalid, late, self-approving
        or already answered ones. With a quorum the request stays pending until it is met."""
        row = self.db.one(GET_REQUEST, {"id": interrupt_id})
        if row is None:
            raise UserError(
                f"no approval request with id {interrupt_id!r}; "
                "`uv run python -m inbox list` shows the pending ones"
            )
        approval = self.get(interrupt_id)
        assert approval is not None
        if approval.answered:
            raise UserError(already_answered(approval))
        if approval.status != "pending" or self._late(row):
            raise self._refuse_late(row, decided_by)
        validate_decisions(approval.request, {"decisions": decisions}, approval.args_schemas)
        rules = _rules(row)
        try:
            check(
                decisions,
                [decided_by],
                requested_by=rules.requested_by,
                separation=rules.separation,
                quorum=1,  # this reviewer alone; the quorum is counted below
                what="this run",
            )
        except UserError as exc:
            self._record(row, decided_by, Event.DECISION_REFUSED, {"error": str(exc)})
            raise
        url = webhook_url()
        if url:
            signer()  # refuse before answering if the delivery could never be signed
        now = self.clock()
        params = {
            "id": interrupt_id,
            "decisions": json.dumps(decisions),
            "decided_by": decided_by,
            "reviewer": decided_by,
            "now": now,
        }
        with self.db.transaction() as tx:
            if approving(decisions):
                names = self._add_approval(tx, row, params)
                if len(names) < rules.quorum:
                    current = self._load(tx, tx.one(GET_REQUEST, params))
                    assert current is not None
                    return current  # still pending
            won = tx.returning(ANSWER, params)
            current = self._load(tx, won or tx.one(GET_REQUEST, params))
            assert current is not None
            if won:
                self._record_in(
                    tx,
                    row,
                    decided_by,
                    Event.DECISION_RECORDED,
                    now,
                    {
                        "decisions": current.decisions,
                        "approvers": current.approvers,
                    },
                )
                if url:
                    Outbox(self.db, self.clock).enqueue(tx, url, answered_event(current))
        if won:
            return current
        if current.answered:  # another reviewer answered between our read and our update
            raise UserError(already_answered(current))
        raise self._refuse_late(row, decided_by)  # the deadline passed in between

    def _add_approval(self, tx: Tx, row: dict[str, Any], params: dict) -> list[str]:
        """Record one distinct approver (all of them must give the same decisions); return the
        approvers so far, in order."""
        if tx.execute(ADD_APPROVAL, params) != 1:
            raise UserError(
                f"{params['reviewer']} already approved request {row['id']}; it needs "
                f"{row['quorum']} distinct approvers"
            )
        rows = tx.all(APPROVALS, params)
        for other in rows:
            if json.loads(other["decisions"]) != json.loads(params["decisions"]):
                raise UserError(
                    f"{other['reviewer']} approved request {row['id']} with other decisions "
                    f"({other['decisions']}); approvers of a quorum must agree"
                )
        names = [r["reviewer"] for r in rows]
        if int(row["quorum"] or 1) > 1:
            detail = {
                "decisions": json.loads(params["decisions"]),
                "approvals": len(names),
                "quorum": row["quorum"],
            }
            self._record_in(
                tx, row, params["reviewer"], Event.APPROVAL_RECORDED, params["now"], detail
            )
        return names

    def _record_in(self, tx: Tx, row: dict, who: str, reason: Event, now: float, detail: dict):
        """An event on the run's audit trail, in the caller's transaction."""
        thread_id = thread_id_from(row["external_id"])
        if thread_id is not None:
            append_event(
                tx, thread_id, now, f"inbox:{who}", reason, {"interrupt_id": row["id"], **detail}
            )

    def _record(self, row: dict, who: str, reason: Event, detail: dict) -> None:
        with self.db.transaction() as tx:
            self._record_in(tx, row, who, reason, self.clock(), detail)

    def raise_quorum(self, interrupt_id: str, quorum: int) -> bool:
        """Reopen an answered request for more approvers: the ones recorded still count, and
        the next ones must give the same decisions."""
        return self.db.execute(REOPEN, {"id": interrupt_id, "quorum": quorum}) == 1

    def mark_ladder(self, interrupt_id: str, step: str) -> None:
        """Show on the request that it was reminded or escalated (``python -m inbox list``)."""
        self.db.execute(MARK_LADDER, {"id": interrupt_id, "ladder": step})

    def close(self, interrupt_id: str, status: str) -> bool:
        """Close a pending request (``expired``/``cancelled``) so nobody can answer it."""
        return self.db.execute(CLOSE, {"id": interrupt_id, "status": status}) == 1

    def shutdown(self) -> None:
        """Nothing to release: the inbox uses the worker's database handle."""

    def _late(self, row: dict[str, Any]) -> bool:
        return row["expires_at"] is not None and row["expires_at"] <= self.clock()

    def _refuse_late(self, row: dict[str, Any], decided_by: str) -> UserError:
        """Record the refused attempt on the run's audit trail, and say why to the reviewer."""
        current = self.db.one(GET_REQUEST, {"id": row["id"]}) or row
        cancelled = current["status"] == "cancelled"
        reason = Event.DECISION_REFUSED if cancelled else Event.LATE_DECISION_REFUSED
        detail = {"decided_by": decided_by, "request_status": current["status"]}
        self._record(row, decided_by, reason, detail)
        if cancelled:
            return UserError(f"request {row['id']} was cancelled; it cannot be answered")
        if current["expires_at"] is None:
            return UserError(f"request {row['id']} is {current['status']}; it cannot be answered")
        return UserError(
            f"request {row['id']} expired at {_stamp(current['expires_at'])}; a decision is no "
            "longer accepted (start a new run if the action is still wanted)"
        )


def _rules(row: dict[str, Any]) -> Rules:
    return Rules(
        requested_by=row.get("requested_by"),
        separation=bool(row.get("separation")),
        quorum=int(row.get("quorum") or 1),
        expires_at=row.get("expires_at"),
    )


def already_answered(approval: Approval) -> str:
    kinds = ", ".join(sorted({d["type"] for d in approval.decisions or []}))
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(approval.answered_at or 0))
    return (
        f"request {approval.id} was already answered ({kinds} by {approval.decided_by} at {when}); "
        "a decision cannot be changed"
    )
