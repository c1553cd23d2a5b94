"""The audit trail's reads and anchors by name (``store.tables.audit()``), so the export, the
evidence pack, ``audit verify`` and the sweep's anchor step never hold the handle. The queries
are ``store.audit``'s, ``store.anchors``' and ``store.verify``'s."""

from __future__ import annotations

from typing import Any

from core import proof
from store import anchors, audit
from store.db import Database
from store.verify import Break, Verified, verify


class AuditTrail:
    def __init__(self, db: Database) -> None:
        self._db = db

    def decisions(self, start: float, end: float) -> list[audit.DecisionEvent]:
        return audit.decisions(self._db, start, end)

    def decision_runs(self, start: float, end: float) -> list[str]:
        return audit.decision_runs(self._db, start, end)

    def chain(self, thread_id: str) -> list[dict[str, Any]]:
        return audit.chain(self._db, thread_id)

    def anchors_in_period(self, start: float, end: float) -> list[dict[str, Any]]:
        return anchors.in_period(self._db, start, end)

    def anchors(self) -> list[dict[str, Any]]:
        return anchors.stored(self._db)

    def write_anchor(
        self, signer: proof.Signer, now: float, every: float | None = None
    ) -> dict[str, Any] | None:
        return anchors.write(self._db, signer, now, every)

    def verify(
        self,
        trust: proof.Trust | None = None,
        *,
        witness: list[dict[str, Any]] | None = None,
        now: float | None = None,
        limit: float | None = None,
    ) -> Break | Verified:
        return verify(self._db, trust, witness=witness, now=now, limit=limit)
