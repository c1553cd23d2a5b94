"""The resume queue, kept in the ``runs`` table itself, so a committed claim is its queue entry.

A run is *queued* when it is ``running``/``resuming`` with ``lease_until = 0`` and a hand-off's
owner (``handoff:<who claimed it>``): every claim (a decision's, a retry's, an operator's
take-over) and every hand-back of a stopping process leaves it so, in the transaction that
makes it, and on Postgres that transaction also sends ``NOTIFY`` on :data:`CHANNEL`. Nothing is
kept in a process's memory, so a process killed right after the commit loses nothing.

A resumer takes the oldest queued run in one short transaction that sets its own owner and
lease (Postgres: ``FOR UPDATE SKIP LOCKED``, so two resumers never take one run and neither
waits for the other; SQLite: its one writer lock). Anyone resuming one run inline (serverless,
the sweep, the command line) takes it by id with the same conditional take-up, so whoever comes
first resumes it, once. The taker's lease is renewed while it runs, as any segment's.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from core.faults import shielded
from store import runs_sql as q
from store.audit import head_of, with_head
from store.db import Tx
from store.states import Event, Run
from store.trail import event as _event

if TYPE_CHECKING:
    from store.runs import RunStore

log = logging.getLogger(__name__)

# The owner prefix of a queued claim: decided, and waiting for any resumer to take it.
HANDOFF = "handoff:"

CHANNEL = "approval_resume"  # the LISTEN/NOTIFY channel; the payload is the thread id
NOTIFY = "SELECT pg_notify('approval_resume', :thread_id)"
LISTEN = "LISTEN approval_resume"

_NEXT = """
SELECT thread_id, status, owner FROM runs
WHERE status IN ('running', 'resuming') AND lease_until = 0 AND owner LIKE 'handoff:%'
ORDER BY updated_at, thread_id
LIMIT 1
"""
# the oldest queued run, locked by this transaction; rows other resumers hold are passed over
NEXT_QUEUED = {"postgres": _NEXT + "FOR UPDATE SKIP LOCKED", "sqlite": _NEXT}

COUNT_QUEUED = """
SELECT count(*) AS n FROM runs
WHERE status IN ('running', 'resuming') AND lease_until = 0 AND owner LIKE 'handoff:%'
"""


def queued(run: Run) -> bool:
    """Whether ``run`` is a queue entry nobody has taken yet."""
    return run.status.active and run.lease_until == 0 and (run.owner or "").startswith(HANDOFF)


def notify(tx: Tx, run: Run) -> None:
    """Wake every listening resumer when ``tx`` commits (Postgres; SQLite's are polled or rung
    in process), if ``run`` was left queued by it."""
    if tx.backend == "postgres" and queued(run):
        tx.execute(NOTIFY, {"thread_id": run.thread_id})


def take_next(runs: RunStore, owner: str, lease_until: float) -> Run | None:
    """Take the oldest queued run for ``owner``, leased until ``lease_until``: its row, or None
    when nothing is queued (or every queued row is being taken by another resumer)."""
    now = runs.clock()
    with runs.db.transaction() as tx:
        found = tx.one(NEXT_QUEUED[tx.backend])
        if found is None:
            return None
        params = {
            "thread_id": found["thread_id"],
            "from_status": found["status"],
            "old_owner": found["owner"],
            "owner": owner,
            "lease_until": lease_until,
            "now": now,
        }
        row = tx.returning(with_head(tx, q.TAKE_UP), params)
        if row is None:  # not under the lock just taken; kept for a changed statement's sake
            return None
        head = head_of(row)
        detail = {"previous_owner": found["owner"]}
        status = found["status"]
        _event(tx, found["thread_id"], now, owner, status, status, Event.TAKEN_UP, detail, head)
        run = Run.from_row(row)
        if runs.on_transition is not None:
            runs.on_transition(tx, run, Event.TAKEN_UP, detail, now)
    if runs.after_commit is not None:
        after = functools.partial(runs.after_commit, run, Event.TAKEN_UP)
        shielded("transition.committed", after)
    return run


def count_queued(runs: RunStore) -> int:
    return int(runs.db.row(COUNT_QUEUED)["n"])


class Listener:
    """A connection of its own that listens on :data:`CHANNEL` (Postgres), for a resumer that
    waits to be woken. A broken connection is opened again at the next wait; meanwhile the
    resumer's poll covers."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: Any = None

    def wait(self, timeout: float) -> bool:
        """Until a notification arrives (True) or ``timeout`` seconds pass (False)."""
        import psycopg

        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self._url, autocommit=True, connect_timeout=10)
                self._conn.execute(LISTEN)
                return True  # anything queued while nobody listened: look now
            for _ in self._conn.notifies(timeout=timeout, stop_after=1):
                return True
            return False
        except psycopg.Error as exc:
            from core.errors import one_line

            log.warning("resumer's listen connection lost (%s); polling", one_line(exc))
            self.close()
            import time

            time.sleep(min(timeout, 1.0))  # not a busy loop while the database is away
            return False

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001, S110 - closing a broken connection
                pass
