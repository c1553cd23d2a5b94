"""The LangGraph checkpointer a store builds: the library's savers, plus one read saved per resume.

A resume reads its thread's latest checkpoint to choose what to feed the graph (which interrupt
the stored decision answers), and LangGraph then reads the same checkpoint again as the stream
starts. The process holds the run's claim in between, so no other process writes that thread:
on Postgres, where the read is a round trip and the heaviest query of a resume, the row read
first is kept and loaded again for the stream (a fresh copy: LangGraph changes the loaded
checkpoint in place). SQLite's read is local and cheap; it is left alone.
"""

from __future__ import annotations

import copy
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.db import Database


def saver(db: Database, path: str) -> Any:
    """The checkpointer over the store's database (imports LangGraph)."""
    if db.backend == "postgres":
        return _postgres_saver(db._pool)
    from langgraph.checkpoint.sqlite import SqliteSaver

    # its own connection: the saver commits
    return SqliteSaver(sqlite3.connect(path, timeout=30, check_same_thread=False))


@contextmanager
def read_once(checkpointer: Any, thread_id: str) -> Iterator[None]:
    """Within: the first read of ``thread_id``'s latest checkpoint is kept and serves the
    second too (this thread only; any other saver reads as usual)."""
    keeping = getattr(checkpointer, "keeping", None)
    if keeping is None:
        yield
        return
    with keeping(thread_id):
        yield


def _postgres_saver(pool: Any) -> Any:
    from langgraph.checkpoint.postgres import PostgresSaver

    class ClaimedPostgresSaver(PostgresSaver):
        """``PostgresSaver`` whose latest-checkpoint read can serve twice (``read_once``).
        Any write to the thread drops what was kept, so a kept row is never older than the
        thread's checkpoints, whichever thread of the process reads or writes next."""

        def __init__(self, conn: Any) -> None:
            super().__init__(conn)
            self._kept: dict[str, Any] = {}  # thread_id -> row read, or None: keep the next
            self._kept_lock = threading.Lock()
            self._loaded = threading.local()  # the row this thread's read just loaded

        @contextmanager
        def keeping(self, thread_id: str) -> Iterator[None]:
            with self._kept_lock:
                self._kept[thread_id] = None
            try:
                yield
            finally:
                with self._kept_lock:
                    self._kept.pop(thread_id, None)

        def get_tuple(self, config: Any) -> Any:
            conf = config["configurable"]
            thread_id = conf.get("thread_id")
            latest = not conf.get("checkpoint_ns") and not conf.get("checkpoint_id")
            with self._kept_lock:
                keep = latest and thread_id in self._kept
                row = self._kept.get(thread_id) if keep else None
                if row is not None:  # the second read: served from the first, once
                    del self._kept[thread_id]
            if row is not None:
                return super()._load_checkpoint_tuple(row)
            if not keep:
                return super().get_tuple(config)
            found = super().get_tuple(config)
            with self._kept_lock:
                if thread_id in self._kept and found is not None:
                    self._kept[thread_id] = self._loaded.row
            return found

        def _load_checkpoint_tuple(self, value: Any) -> Any:
            self._loaded.row = copy.deepcopy(value) if self._kept else None
            return super()._load_checkpoint_tuple(value)

        def put(self, config: Any, *args: Any, **kwargs: Any) -> Any:
            self._drop(config)
            return super().put(config, *args, **kwargs)

        def put_writes(self, config: Any, *args: Any, **kwargs: Any) -> None:
            self._drop(config)
            super().put_writes(config, *args, **kwargs)

        def _drop(self, config: Any) -> None:
            if self._kept:
                with self._kept_lock:
                    thread_id = config["configurable"].get("thread_id")
                    if self._kept.get(thread_id) is not None:
                        self._kept.pop(thread_id)

    return ClaimedPostgresSaver(pool)
