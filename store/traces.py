"""A run's trace context (migration 23): the W3C ``traceparent`` of the span that started it,
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

# A run's context never changes once stored, and one started while tracing was off never gets
# one (it is stored as the run starts, before anything can decide it): each process keeps what
# it read (bounded; "" for none), so a decision and the resume after it read it once.
_KNOWN: dict[str, str] = {}
_KNOWN_MAX = 4096


class TraceRows:
    """A database's runs' trace contexts (``store.tables.traces()``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def save(self, thread_id: str, traceparent: str) -> None:
        save(self._db, thread_id, traceparent)

    def traceparent_of(self, thread_id: str) -> str | None:
        return traceparent_of(self._db, thread_id)

    def paused_at(self, thread_id: str) -> float | None:
        return paused_at(self._db, thread_id)


def save(db: Database, thread_id: str, traceparent: str) -> None:
    """Keep the first trace context a run is given (a retried start keeps its trace)."""
    if db.execute(SAVE, {"thread_id": thread_id, "traceparent": traceparent}) == 1:
        _KNOWN[thread_id] = traceparent  # a new run under a reused id is not an old one


def traceparent_of(db: Database, thread_id: str) -> str | None:
    known = _KNOWN.get(thread_id)
    if known is not None:
        return known or None
    row = db.one(GET, {"thread_id": thread_id})
    if row is None:  # no such run (yet): nothing to remember
        return None
    if len(_KNOWN) >= _KNOWN_MAX:
        _KNOWN.clear()
    _KNOWN[thread_id] = row["traceparent"] or ""
    return row["traceparent"]


def paused_at(db: Database, thread_id: str) -> float | None:
    """When the run's latest pause began (None: it never paused)."""
    row = db.one(PAUSED_AT, {"thread_id": thread_id})
    return None if row is None else float(row["at"])
