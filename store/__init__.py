"""Durable state for the approval worker.

Everything that must survive a process exit lives here: the LangGraph checkpointer, the ``runs``
state machine with its audit trail, and the ledgers the tools write to. SQLite in the working
directory is the embedded default; ``DATABASE_URL=postgresql://...`` switches every table (and the
checkpointer) to Postgres so any number of processes can coordinate through conditional updates.
"""

from store.db import Database, open_checkpointer, open_store
from store.errors import UserError
from store.runs import Run, RunStore

__all__ = ["Database", "Run", "RunStore", "UserError", "open_checkpointer", "open_store"]
