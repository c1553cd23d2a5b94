"""Delegations: a reviewer lends their authority to one other person for a period (out of
office). A row names both people (as given, and normalised for comparison), the groups the
delegator held when they delegated, the period and its revocation; rows are never deleted, so
who could act for whom, and when, stays readable. The rules (one step, no self-approval) are
the decision path's (``worker.delegation``); here is only what is stored.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from store.db import Database

INSERT = """
INSERT INTO delegations (id, delegator, delegator_key, delegate, delegate_key, groups,
                         starts_at, ends_at, created_by, created_at, credential)
VALUES (:id, :delegator, :delegator_key, :delegate, :delegate_key, :groups,
        :starts_at, :ends_at, :created_by, :now, :credential)
"""
GET = "SELECT * FROM delegations WHERE id = :id"
# every delegation from or to someone that has not ended yet (newest first), bounded
CURRENT = """
SELECT * FROM delegations
WHERE (delegator_key = :key OR delegate_key = :key) AND revoked_at IS NULL AND ends_at > :now
ORDER BY starts_at DESC, id LIMIT :limit
"""
# the delegations someone may act under now: to them, started, not ended, not revoked, and
# the delegator's key that granted it not revoked either (a JWT's grant cannot be asked again)
ACTIVE_TO = """
SELECT * FROM delegations
WHERE delegate_key = :key AND revoked_at IS NULL AND starts_at <= :now AND ends_at > :now
  AND (credential IS NULL OR credential NOT LIKE 'key:%' OR EXISTS (SELECT 1 FROM api_keys k
       WHERE 'key:' || k.id = delegations.credential AND k.revoked_at IS NULL))
ORDER BY delegator_key, starts_at LIMIT :limit
"""
COUNT_FROM = """
SELECT COUNT(*) AS n FROM delegations
WHERE delegator_key = :key AND revoked_at IS NULL AND ends_at > :now
"""
REVOKE = """
UPDATE delegations SET revoked_at = :now
WHERE id = :id AND revoked_at IS NULL AND ends_at > :now
RETURNING *
"""
MAX_LISTED = 100


@dataclass(frozen=True)
class Delegation:
    id: str
    delegator: str
    delegator_key: str
    delegate: str
    delegate_key: str
    groups: frozenset[str]  # the delegator's, when they delegated: the authority lent
    starts_at: float
    ends_at: float
    revoked_at: float | None
    created_by: str

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Delegation:
        return cls(
            id=row["id"],
            delegator=row["delegator"],
            delegator_key=row["delegator_key"],
            delegate=row["delegate"],
            delegate_key=row["delegate_key"],
            groups=frozenset(g for g in (row["groups"] or "").split("\n") if g),
            starts_at=row["starts_at"],
            ends_at=row["ends_at"],
            revoked_at=row["revoked_at"],
            created_by=row["created_by"],
        )

    def active(self, now: float) -> bool:
        return self.revoked_at is None and self.starts_at <= now < self.ends_at

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "delegator": self.delegator,
            "delegate": self.delegate,
            "groups": sorted(self.groups),
            "starts_at": self.starts_at,
            "ends_at": self.ends_at,
            "revoked_at": self.revoked_at,
            "created_by": self.created_by,
        }


class Delegations:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db = db
        self.clock = clock

    def create(
        self,
        delegator: tuple[str, str],
        delegate: tuple[str, str],
        groups: frozenset[str],
        ends_at: float,
        created_by: str,
        starts_at: float | None = None,
        credential: str | None = None,
    ) -> Delegation:
        """A delegation from ``starts_at`` (now) until ``ends_at``; people are ``(name,
        identity key)``; ``credential``: the delegator's (``key:<id>``), whose revocation ends it.
        Groups are stored one per line (a JWT's group may hold any other character)."""
        delegation_id = secrets.token_hex(8)
        row = {
            "id": delegation_id,
            "delegator": delegator[0],
            "delegator_key": delegator[1],
            "delegate": delegate[0],
            "delegate_key": delegate[1],
            "groups": "\n".join(sorted(groups)),
            "now": self.clock(),
            "starts_at": self.clock() if starts_at is None else starts_at,
            "ends_at": ends_at,
            "created_by": created_by,
            "credential": credential,
        }
        self.db.execute(INSERT, row)
        found = self.get(delegation_id)
        assert found is not None
        return found

    def get(self, delegation_id: str) -> Delegation | None:
        row = self.db.one(GET, {"id": delegation_id})
        return None if row is None else Delegation.from_row(row)

    def current(self, key: str) -> list[Delegation]:
        """Delegations from or to ``key`` that have not ended or been revoked."""
        params = {"key": key, "now": self.clock(), "limit": MAX_LISTED}
        return [Delegation.from_row(r) for r in self.db.all(CURRENT, params)]

    def active_to(self, key: str, at: float | None = None) -> list[Delegation]:
        """What ``key`` may act under at ``at`` (now): one row per delegation to them."""
        now = self.clock() if at is None else at
        params = {"key": key, "now": now, "limit": MAX_LISTED}
        return [Delegation.from_row(r) for r in self.db.all(ACTIVE_TO, params)]

    def count_from(self, key: str) -> int:
        row = self.db.one(COUNT_FROM, {"key": key, "now": self.clock()})
        return int(row["n"]) if row else 0

    def revoke(self, delegation_id: str) -> Delegation | None:
        """End it now; None if it had already ended or been revoked (nothing changes)."""
        with self.db.transaction() as tx:
            row = tx.returning(REVOKE, {"id": delegation_id, "now": self.clock()})
        return None if row is None else Delegation.from_row(row)
