"""Every table the worker owns, as one append-only list of migrations; the only place DDL lives.

Migration ``n`` (1-based) brings a database from version ``n - 1`` to ``n``; a fresh database
replays them all, an older one only those after its version, so both end with the same schema.
Never edit a migration that has shipped: append a new one. Times are epoch seconds (floats) and
JSON is stored as text, so both backends read the same. ``{real}`` and ``{serial}`` become each
backend's types; an entry that is a dict holds one backend's own statements (Postgres functions).
Versions 1 to 4 are the schemas earlier releases recorded in ``approval_schema``.
"""

from __future__ import annotations

import re

from store.migrations_1_19 import SHIPPED_TO_19

MIGRATIONS: list[str | dict[str, str]] = [
    *SHIPPED_TO_19,  # 1 to 19, in store/migrations_1_19.py
    # append here: "# n (issue k): why", never edit an entry that has shipped
    # 20 (issue 38): the W3C traceparent of the span that started the run, so every later
    #     segment, decision and resume, in whichever process, continues the run's one trace
    "ALTER TABLE runs ADD COLUMN traceparent TEXT",
]

SCHEMA_VERSION = len(MIGRATIONS)

_TYPES = {
    "sqlite": {"real": "REAL", "serial": "INTEGER PRIMARY KEY AUTOINCREMENT"},
    "postgres": {"real": "DOUBLE PRECISION", "serial": "BIGSERIAL PRIMARY KEY"},
}

_END = re.compile(r";[ \t]*(?:\n|$)")  # a statement ends with ';' at a line's end


def pending(from_version: int, backend: str) -> list[str]:
    """The statements that bring a database at ``from_version`` (0: fresh) up to date."""
    statements = []
    for migration in MIGRATIONS[from_version:]:
        if isinstance(migration, dict):  # one backend's own (empty for the other)
            migration = migration.get(backend, "")
        text = migration.format(**_TYPES[backend])
        statements += [s.strip() for s in _END.split(text) if s.strip()]
    return statements
