"""Handing a claim back: a stopping process releases the lease on a run it can no longer
finish, which queues it again (``store.claimed``): a live resumer takes it over at once instead
of waiting for the lease to run out (``LEASE_SECONDS``, five minutes by default)."""

from __future__ import annotations

import os
import socket

from store.claimed import HANDOFF, NOTIFY
from store.db import Database

# The owner becomes a hand-off's, so the taker resumes it as a hand-off taken up (no attempt
# counted: the run did not fail) and its trail names the owner that let go.
RELEASE = """
UPDATE runs SET owner = :handed, lease_until = 0
WHERE thread_id = :thread_id AND owner = :owner AND status IN ('running', 'resuming')
"""


ACTIVE = """
SELECT thread_id, owner FROM runs WHERE status IN ('running', 'resuming') AND lease_until > 0
"""


def release_ours(db: Database) -> list[str]:
    """Release every active run claimed by an owner of this process (``store.runs.new_owner``:
    ``role@host:pid:...``), including one claimed but not yet running; the threads released."""
    mark = f"@{socket.gethostname()}:{os.getpid()}:"
    return [
        row["thread_id"]
        for row in db.all(ACTIVE)
        if mark in (row["owner"] or "") and release(db, row["thread_id"], row["owner"])
    ]


def release(db: Database, thread_id: str, owner: str) -> bool:
    """Release ``owner``'s lease on ``thread_id``; False if it no longer held it."""
    handed = owner if owner.startswith(HANDOFF) else f"{HANDOFF}{owner}"
    params = {"thread_id": thread_id, "owner": owner, "handed": handed}
    with db.transaction() as tx:
        released = tx.execute(RELEASE, params) == 1
        if released and tx.backend == "postgres":  # queued again: wake the resumers
            tx.execute(NOTIFY, {"thread_id": thread_id})
    return released


def release_of(db: Database, host: str, pid: int) -> list[str]:
    """Release every active run a process that is known to be gone (``host``, ``pid``) took:
    a resumer process that died, so its runs are queued again at once, not after the lease."""
    mark = f"@{host}:{pid}:"
    return [
        row["thread_id"]
        for row in db.all(ACTIVE)
        if mark in (row["owner"] or "") and release(db, row["thread_id"], row["owner"])
    ]


class LeaseRows:
    """Handing claims back on one database (``store.tables.leases()``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def release(self, thread_id: str, owner: str) -> bool:
        return release(self._db, thread_id, owner)

    def release_ours(self) -> list[str]:
        return release_ours(self._db)

    def release_of(self, host: str, pid: int) -> list[str]:
        return release_of(self._db, host, pid)
