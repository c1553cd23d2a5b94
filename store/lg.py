"""The LangGraph Server API's own rows (migration 24): threads made before their run, the runs
started or resumed through ``/lg``, their stream events and what each reviewer last read.

A thread that has a run is that run (``runs``); ``lg_threads`` only holds one created empty
(``threads.create``) until its run starts. An ``lg_runs`` row is one start or resume: the
segment that carries it out appends its stream events (``lg_events``, numbered from 1 per run)
in whichever process it runs, so a client reconnecting with ``Last-Event-ID`` is answered from
here even when the process that began the stream is gone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from store.db import Database

OPEN = ("pending", "running")  # a run the next segment on its thread carries out

_NEW_THREAD = """
INSERT INTO lg_threads (thread_id, created_by, metadata, created_at)
VALUES (:thread_id, :created_by, :metadata, :at) ON CONFLICT (thread_id) DO NOTHING
"""
_THREAD = "SELECT * FROM lg_threads WHERE thread_id = :thread_id"
_DROP_THREAD = "DELETE FROM lg_threads WHERE thread_id = :thread_id"
_DROP_RUNS_EVENTS = """
DELETE FROM lg_events WHERE run_id IN (SELECT run_id FROM lg_runs WHERE thread_id = :thread_id)
"""
_DROP_RUNS = "DELETE FROM lg_runs WHERE thread_id = :thread_id"
_DROP_READS = "DELETE FROM lg_reads WHERE thread_id = :thread_id"
_NEW_RUN = """
INSERT INTO lg_runs (run_id, thread_id, assistant_id, status, modes, metadata, created_at,
    updated_at)
VALUES (:run_id, :thread_id, :assistant_id, 'pending', :modes, :metadata, :at, :at)
"""
_DROP_RUN = "DELETE FROM lg_runs WHERE run_id = :run_id"
_META = "UPDATE lg_runs SET metadata = :metadata WHERE run_id = :run_id"
_RUN = "SELECT * FROM lg_runs WHERE thread_id = :thread_id AND run_id = :run_id"
_RUNS = """
SELECT * FROM lg_runs WHERE thread_id = :thread_id {status}
ORDER BY created_at DESC, run_id LIMIT :limit OFFSET :offset
"""
_OPEN = """
SELECT * FROM lg_runs WHERE thread_id = :thread_id AND status IN ('pending', 'running')
ORDER BY created_at DESC, run_id LIMIT 1
"""
_SET = """
UPDATE lg_runs SET status = :status, updated_at = :at
WHERE run_id = :run_id AND status IN ('pending', 'running')
"""
_APPEND = """
INSERT INTO lg_events (run_id, seq, event, data, at)
SELECT :run_id, COALESCE(MAX(seq), 0) + 1, :event, :data, :at FROM lg_events
WHERE run_id = :run_id
"""
_AFTER = """
SELECT seq, event, data FROM lg_events WHERE run_id = :run_id AND seq > :after
ORDER BY seq LIMIT :limit
"""
_READ = """
INSERT INTO lg_reads (thread_id, reader_key, interrupt_id, digest, at)
VALUES (:thread_id, :reader_key, :interrupt_id, :digest, :at)
ON CONFLICT (thread_id, reader_key) DO UPDATE
SET interrupt_id = :interrupt_id, digest = :digest, at = :at
"""
_LAST_READ = "SELECT * FROM lg_reads WHERE thread_id = :thread_id AND reader_key = :reader_key"


@dataclass(frozen=True)
class LgRun:
    run_id: str
    thread_id: str
    assistant_id: str
    status: str  # LangGraph's: pending, running, success, error, interrupted
    modes: list[str]
    metadata: dict[str, Any]
    created_at: float
    updated_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LgRun:
        return cls(
            run_id=row["run_id"],
            thread_id=row["thread_id"],
            assistant_id=row["assistant_id"],
            status=row["status"],
            modes=json.loads(row["modes"]),
            metadata=json.loads(row["metadata"]),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    @property
    def open(self) -> bool:
        return self.status in OPEN


@dataclass(frozen=True)
class LgThread:
    """A thread made empty (``threads.create``) whose run has not started: who made it, when,
    and the metadata it was made with."""

    thread_id: str
    created_by: str
    metadata: dict[str, Any]
    created_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LgThread:
        return cls(
            thread_id=row["thread_id"],
            created_by=row["created_by"],
            metadata=json.loads(row["metadata"]),
            created_at=row["created_at"],
        )


@dataclass(frozen=True)
class LgEvent:
    """One stream event of an ``/lg`` run, as a client (re)reads it: its number, name, and
    data as JSON text, sent as it is."""

    seq: int
    event: str
    data: str


@dataclass(frozen=True)
class LgRead:
    """What a reviewer last read on a thread: the request (interrupt and digest) a resume that
    names none is taken to answer."""

    interrupt_id: str
    digest: str | None
    at: float


class LgTables:
    """The ``/lg`` rows of one database, by operation (``store.tables.lg()``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create_thread(
        self, thread_id: str, created_by: str, metadata: dict[str, Any], at: float
    ) -> bool:
        """True if the thread is new (an existing id is left as it is)."""
        params = {"thread_id": thread_id, "created_by": created_by, "at": at}
        return self._db.execute(_NEW_THREAD, {**params, "metadata": json.dumps(metadata)}) == 1

    def thread(self, thread_id: str) -> LgThread | None:
        row = self._db.one(_THREAD, {"thread_id": thread_id})
        return None if row is None else LgThread.from_row(row)

    def drop_thread(self, thread_id: str) -> None:
        """The thread's own rows, its runs' and their events (the run itself stays: retention's)."""
        with self._db.transaction() as tx:
            for sql in (_DROP_RUNS_EVENTS, _DROP_RUNS, _DROP_READS, _DROP_THREAD):
                tx.execute(sql, {"thread_id": thread_id})

    def new_run(
        self,
        run_id: str,
        thread_id: str,
        assistant_id: str,
        modes: list[str],
        metadata: dict[str, Any],
        at: float,
    ) -> LgRun:
        params = {"run_id": run_id, "thread_id": thread_id, "assistant_id": assistant_id, "at": at}
        self._db.execute(
            _NEW_RUN, {**params, "modes": json.dumps(modes), "metadata": json.dumps(metadata)}
        )
        found = self.run(thread_id, run_id)
        assert found is not None
        return found

    def drop_run(self, run_id: str) -> None:
        """Undo :func:`new_run` for a start or resume that was refused (it leaves nothing)."""
        self._db.execute(_DROP_RUN, {"run_id": run_id})

    def set_metadata(self, run_id: str, metadata: dict[str, Any]) -> None:
        self._db.execute(_META, {"run_id": run_id, "metadata": json.dumps(metadata)})

    def run(self, thread_id: str, run_id: str) -> LgRun | None:
        row = self._db.one(_RUN, {"thread_id": thread_id, "run_id": run_id})
        return None if row is None else LgRun.from_row(row)

    def runs(self, thread_id: str, status: str | None, limit: int, offset: int) -> list[LgRun]:
        sql = _RUNS.format(status="AND status = :status" if status else "")
        params = {"thread_id": thread_id, "status": status, "limit": limit, "offset": offset}
        return [LgRun.from_row(row) for row in self._db.all(sql, params)]

    def open_run(self, thread_id: str) -> LgRun | None:
        """The newest run on the thread still to be carried out (pending or running), if any."""
        row = self._db.one(_OPEN, {"thread_id": thread_id})
        return None if row is None else LgRun.from_row(row)

    def set_status(self, run_id: str, status: str, at: float) -> bool:
        """Move an open run on (to ``running`` or an end); an ended one stays as it ended."""
        return self._db.execute(_SET, {"run_id": run_id, "status": status, "at": at}) == 1

    def fail(self, run_id: str, data: str, at: float) -> None:
        """End a run that never started in ``error``, with the event that says why, together:
        a client reading the stream sees the error whenever it sees the end."""
        with self._db.transaction() as tx:
            tx.execute(_APPEND, {"run_id": run_id, "event": "error", "data": data, "at": at})
            tx.execute(_SET, {"run_id": run_id, "status": "error", "at": at})

    def append_event(self, run_id: str, event: str, data: str, at: float) -> None:
        self._db.execute(_APPEND, {"run_id": run_id, "event": event, "data": data, "at": at})

    def events_after(self, run_id: str, after: int, limit: int = 200) -> list[LgEvent]:
        """The run's events numbered above ``after``, in order."""
        rows = self._db.all(_AFTER, {"run_id": run_id, "after": after, "limit": limit})
        return [LgEvent(r["seq"], r["event"], r["data"]) for r in rows]

    def record_read(
        self, thread_id: str, reader_key: str, interrupt_id: str, digest: str | None, at: float
    ) -> None:
        params = {"thread_id": thread_id, "reader_key": reader_key, "at": at}
        self._db.execute(_READ, {**params, "interrupt_id": interrupt_id, "digest": digest})

    def last_read(self, thread_id: str, reader_key: str) -> LgRead | None:
        row = self._db.one(_LAST_READ, {"thread_id": thread_id, "reader_key": reader_key})
        return None if row is None else LgRead(row["interrupt_id"], row["digest"], row["at"])
