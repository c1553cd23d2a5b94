"""Receipts: a side effect's result recorded under an idempotency key that is stable across
retries (``<thread>:<tool call id>:<tool>:v1``).

A retried tool call finds the receipt and returns the recorded result instead of acting again.
The write itself must also be idempotent downstream (the ledgers' unique keys): a process can die
after the write and before the receipt, and the retry then meets the first write there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core import tracing
from store import halts
from store.db import Database
from store.states import Event
from store.trail import append_event

GET_RECEIPT = "SELECT result FROM receipts WHERE idempotency_key = :idempotency_key"

INSERT_RECEIPT = """
INSERT INTO receipts (idempotency_key, thread_id, tool, result, created_at)
VALUES (:idempotency_key, :thread_id, :tool, :result, :now)
ON CONFLICT (idempotency_key) DO NOTHING
"""

RECEIPTS_FOR_THREAD = "SELECT * FROM receipts WHERE thread_id = :thread_id ORDER BY created_at"


@dataclass(frozen=True)
class Receipt:
    """A side effect done once under its idempotency key: the tool and what it returned."""

    idempotency_key: str
    thread_id: str
    tool: str
    result: Any
    created_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Receipt:
        return cls(
            idempotency_key=row["idempotency_key"],
            thread_id=row["thread_id"],
            tool=row["tool"],
            result=json.loads(row["result"]),
            created_at=row["created_at"],
        )


class Receipts:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db = db
        self.clock = clock

    def once(
        self, key: str, *, thread_id: str, tool: str, act: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """``act()`` at most once per key as far as callers can tell; the first result wins.
        Traced as the GenAI convention's tool span, saying whether the tool acted this time
        or its receipt answered (``core.tracing``)."""
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
        with tracing.span(f"execute_tool {tool}", attributes=attributes) as effect:
            if not effect.is_recording():
                return self._once(key, thread_id=thread_id, tool=tool, act=act)

            def acted() -> dict[str, Any]:
                effect.set_attribute("approval_worker.tool.acted", True)
                return act()

            effect.set_attribute("approval_worker.tool.acted", False)
            return self._once(key, thread_id=thread_id, tool=tool, act=acted)

    def _once(
        self, key: str, *, thread_id: str, tool: str, act: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        row = self.db.one(GET_RECEIPT, {"idempotency_key": key})
        if row is not None:
            return json.loads(row["result"])
        with halts.effect_gate(self.db, thread_id, tool):  # the stop button, before acting
            result = act()
        now = self.clock()
        with self.db.transaction() as tx:
            written = tx.execute(
                INSERT_RECEIPT,
                {
                    "idempotency_key": key,
                    "thread_id": thread_id,
                    "tool": tool,
                    "result": json.dumps(result),
                    "now": now,
                },
            )
            if written == 1:
                detail = {"tool": tool, "idempotency_key": key, "result": result}
                append_event(tx, thread_id, now, f"tool:{tool}", Event.SIDE_EFFECT, detail)
            stored = tx.row(GET_RECEIPT, {"idempotency_key": key})
        return json.loads(stored["result"])

    def for_thread(self, thread_id: str) -> list[Receipt]:
        """The run's side effects done, oldest first."""
        rows = self.db.all(RECEIPTS_FOR_THREAD, {"thread_id": thread_id})
        return [Receipt.from_row(r) for r in rows]
