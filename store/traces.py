"""A run's trace context (migration 20): the W3C ``traceparent`` of the span that started it,
kept with the run so that every later segment, decision and resume, in whichever process,
continues the same trace (``core.tracing``). Read and written only while tracing is on.
"""

from __future__ import annotations

from store.db import Database

SAVE = """
UPDATE runs SET traceparent = :traceparent
WHERE thread_id = :thread_id AND traceparent IS NULL
"""

GET = "SELECT traceparent FROM runs WHERE thread_id = :thread_id"

# when the run last began to wait: the start of the wait a decision ends
PAUSED_AT = """
SELECT at FROM run_events WHERE thread_id = :thread_id AND to_status = 'waiting'
ORDER BY id DESC LIMIT 1
"""


def save(db: Database, thread_id: str, traceparent: str) -> None:
    """Keep the first trace context a run is given (a retried start keeps its trace)."""
    db.execute(SAVE, {"thread_id": thread_id, "traceparent": traceparent})


def traceparent_of(db: Database, thread_id: str) -> str | None:
    row = db.one(GET, {"thread_id": thread_id})
    return None if row is None else row["traceparent"]


def paused_at(db: Database, thread_id: str) -> float | None:
    """When the run's latest pause began (None: it never paused)."""
    row = db.one(PAUSED_AT, {"thread_id": thread_id})
    return None if row is None else float(row["at"])
