"""Partial answers: when a pause holds several interrupts (parallel branches, ``Send``
fan-outs, subgraphs, tools), each may be answered by a different person at a different time.
Each answer is kept here, one row per action of the pause, until every one is answered and the
run is claimed with them all; the first answer to an action wins, so none is asked twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core import exactjson
from store.db import Database
from store.runs import Within
from store.states import Event
from store.trail import append_event

ADD_ANSWER = """
INSERT INTO run_answers (thread_id, interrupt_id, position, reviewer, decision, source, at)
VALUES (:thread_id, :interrupt_id, :position, :reviewer, :decision, :source, :now)
ON CONFLICT (thread_id, interrupt_id, position) DO NOTHING
"""

LIST_ANSWERS = """
SELECT position, reviewer, decision, source, at FROM run_answers
WHERE thread_id = :thread_id AND interrupt_id = :interrupt_id ORDER BY position
"""


@dataclass(frozen=True)
class Answer:
    """One action's decision, given ahead of the others of its pause."""

    position: int  # the action's index in the request
    reviewer: str
    decision: dict[str, Any]
    source: str
    at: float


class _Taken(Exception):
    """An action was answered first by someone else: nothing of this answer is written."""


class RunAnswers:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db = db
        self.clock = clock

    def add(
        self,
        thread_id: str,
        interrupt_id: str,
        decisions: dict[int, dict[str, Any]],
        reviewer: str,
        *,
        source: str,
        total: int,
        within: Within | None = None,
    ) -> bool:
        """Record ``decisions`` (position -> decision) all at once, with one audit event; False
        (and nothing written) if any of those actions already has an answer. ``within``: the
        caller's writes committed with them."""
        now = self.clock()
        params = {"thread_id": thread_id, "interrupt_id": interrupt_id}
        try:
            with self.db.transaction() as tx:
                for position, decision in sorted(decisions.items()):
                    row = {
                        **params,
                        "position": position,
                        "reviewer": reviewer,
                        "decision": exactjson.dumps(decision),
                        "source": source,
                        "now": now,
                    }
                    if tx.execute(ADD_ANSWER, row) != 1:
                        raise _Taken
                count = len(tx.all(LIST_ANSWERS, params))
                detail = {
                    "interrupt_id": interrupt_id,
                    "answers": {str(p): d for p, d in sorted(decisions.items())},
                    "answered": count,
                    "of": total,
                    "source": source,
                }
                append_event(
                    tx, thread_id, now, f"{source}:{reviewer}", Event.ANSWER_RECORDED, detail
                )
                if within is not None:
                    within(tx)
        except _Taken:
            return False
        return True

    def list(self, thread_id: str, interrupt_id: str) -> dict[int, Answer]:
        """The answers given so far to this pause, by position."""
        rows = self.db.all(LIST_ANSWERS, {"thread_id": thread_id, "interrupt_id": interrupt_id})
        return {
            r["position"]: Answer(
                r["position"], r["reviewer"], json.loads(r["decision"]), r["source"], r["at"]
            )
            for r in rows
        }
