"""Durable state: the checkpointer factory, the ``runs`` state machine with its audit trail,
receipts, and the one list of schema migrations.

Everything that must survive a process exit lives here. SQLite in the working directory is the
embedded default; ``DATABASE_URL=postgresql://...`` switches every table (and the checkpointer)
to Postgres so any number of processes can coordinate through conditional updates. Every
statement on these tables is written here, so a schema change is an edit in one package; other
packages call functions that return typed rows (``tests/test_layout.py`` checks).
"""
