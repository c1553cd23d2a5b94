"""Every table's rows as a digest, to show that a refusal changed nothing."""

from __future__ import annotations

import hashlib
from typing import Any

from testkit.databases import pointed_at
from testkit.wait import until

# The rate limiter's counters record attempts, refused ones included (hammering must keep a
# caller out), so they are the one table a refusal moves: docs/limits.md.
COUNTERS = {"rate_limits"}


def tables(db_env: dict[str, str]) -> dict[str, str]:
    """A digest of every table's rows, checkpoints included (the rate counters excepted)."""
    from store.db import open_store

    with pointed_at(db_env), open_store() as store:
        db = store.db
        if db.backend == "sqlite":
            names = [r["name"] for r in db.all("SELECT name FROM sqlite_master WHERE type='table'")]
        else:
            names = [
                r["table_name"]
                for r in db.all(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema()"
                )
            ]
        out = {}
        for name in sorted(set(names) - COUNTERS):
            # a row's values in the table's column order (the same for every row); sorted, as
            # the rows come in no order
            rows = sorted(repr(tuple(r.values())) for r in db.all(f'SELECT * FROM "{name}"'))
            out[name] = hashlib.sha256("\n".join(rows).encode()).hexdigest()
        return out


def settled_tables(db_env: dict[str, str], timeout: float = 30) -> dict[str, str]:
    """:func:`tables` once a running app's notification sender has delivered everything queued
    (to a receiver that answers 2xx). Without the wait, a snapshot taken while the sender marks
    a row delivered differs from the next one for a reason that is not the request under test."""
    from store.db import open_store

    with pointed_at(db_env), open_store() as store:

        def delivered() -> bool:
            queued = store.db.one(
                "SELECT COUNT(*) AS n FROM webhook_outbox WHERE delivered_at IS NULL"
            )
            return not queued or not queued["n"]

        until(delivered, "the app's sender to deliver every queued notification", timeout)
    return tables(db_env)


def reset_books(db: Any) -> None:
    """The demo's books start over for a test sharing one database (``Ledger.clear``), and so
    does what each person approved per order or cost center: the authority matrix counts that
    cumulatively, and a module that refunds the same five orders again and again would
    otherwise find its reviewers past their band."""
    from agent.ledger import Ledger

    Ledger(db).clear()
    db.execute("DELETE FROM approved_amounts")
