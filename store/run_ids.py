"""The ids the worker gives the runs it names itself (a start without a chosen ``thread_id``).

One generator, here, injected into the lifecycle (``Runner(run_ids=...)``), so every entry
point that starts a run (``POST /runs``, ``approval-worker run``, ``run.py``, the Lambda
handler through the same app) draws from it, and a test can make it repeat.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

RunIds = Callable[[], str]

PREFIX = "thread_"
# A drawn id that is taken is drawn again this many times in all, then the start is refused:
# with 122 random bits a repeat means a broken generator, never bad luck.
ATTEMPTS = 3


def new_run_id() -> str:
    """``thread_`` and the 32 hex digits of a random UUID (version 4): 39 characters, 122 bits
    from the operating system's CSPRNG (``os.urandom``), so ids never collide in practice (a
    billion runs: about 1 in 10^19) and cannot be guessed from another.

    Why not a time-ordered UUIDv7 or ULID, which would append to the primary-key index instead
    of inserting at random places in it: they carry 74 and 80 random bits, short of the 122
    this id must have, and they publish when each run started. A time-ordered id with 122
    random bits would still append, and it does help the index, but too little to matter:
    ``bench/run_ids.py`` measured about 0.05-0.08 ms less per insert at 100,000 rows on SQLite
    (125 against 73 us, a loaded 2-core machine), under 1% of a start (about 10 ms, section 2
    of ``bench/RESULTS.md``); finished runs are pruned (``RETAIN_RUNS_FOR``), so the table stays
    small. Not worth a longer id that tells when each run began. The id has no dot, so it
    never equals a chosen id, which is always ``<chosen>.<scope>`` over HTTP
    (``api.runs.scoped_thread_id``); the 8-hex-digit ``thread_`` ids generated before keep
    working as they are (nothing rewrites them)."""
    return PREFIX + uuid.uuid4().hex
