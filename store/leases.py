"""Handing a claim back: a stopping process releases the lease on a run it can no longer
finish, so another process takes it over at its next sweep instead of waiting for the lease to
run out (``LEASE_SECONDS``, five minutes by default)."""

from __future__ import annotations

import os
import socket

from store.db import Database
from store.runs import HANDOFF

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
    return db.execute(RELEASE, params) == 1
