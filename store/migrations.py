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
    # 20 (issue 32): one principal. A run's requester as one identity (core.identity), so the
    # quota and "mine" count a person however spelled (old runs: the lower-cased name, the key
    # of any lower-case ASCII name); the credential behind a Slack link and a delegation, so a
    # revoked key ends them; Slack links pending until proven from the other side (a code)
    """
ALTER TABLE runs ADD COLUMN requester_key TEXT;
UPDATE runs SET requester_key = LOWER(TRIM(requested_by)) WHERE requested_by IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_requester_key_idx ON runs (requester_key, status);
ALTER TABLE slack_links ADD COLUMN credential TEXT;
ALTER TABLE slack_links ADD COLUMN valid_until {real};
CREATE TABLE IF NOT EXISTS slack_link_codes (
    digest TEXT PRIMARY KEY,
    slack_user TEXT NOT NULL,
    reviewer TEXT,
    credential TEXT,
    valid_until {real},
    started_by TEXT NOT NULL,
    expires_at {real} NOT NULL
);
ALTER TABLE delegations ADD COLUMN credential TEXT;
""",
    # 21 (issue 35): anchors signed with Ed25519 name their algorithm and key id and also sign
    #     retention's prune records and (the first) the events from before the chain; halts
    #     (a workflow, a tool or everything) stop runs across processes and restarts
    """
ALTER TABLE audit_anchors ADD COLUMN alg TEXT;
ALTER TABLE audit_anchors ADD COLUMN kid TEXT;
ALTER TABLE audit_anchors ADD COLUMN pruned TEXT;
ALTER TABLE audit_anchors ADD COLUMN genesis TEXT;
CREATE TABLE IF NOT EXISTS halts (
    scope TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    actor TEXT NOT NULL,
    at {real} NOT NULL
)
""",
    # 22 (issue 32): what each person approved, per business object (an order, a cost center),
    # so the authority matrix judges the cumulative amount and a refund split below a band
    # does not pass it
    """
    CREATE TABLE approved_amounts (
        thread_id TEXT NOT NULL,
        interrupt_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        principal_key TEXT NOT NULL,
        subject TEXT NOT NULL,
        amount TEXT NOT NULL,
        at {real} NOT NULL,
        PRIMARY KEY (thread_id, interrupt_id, position, principal_key)
    );
    CREATE INDEX approved_amounts_by_principal ON approved_amounts (principal_key, subject);
    """,
    # 23 (issue 38): the W3C traceparent of the span that started the run, so every later
    #     segment, decision and resume, in whichever process, continues the run's one trace
    "ALTER TABLE runs ADD COLUMN traceparent TEXT",
    # 24 (issue 37): the LangGraph Server API's own objects: threads made before their run,
    #     its runs (one per start or resume through /lg), their stream events (kept so a stream
    #     that outlives a process is joined from the database) and, per reviewer, the request
    #     each last read there (a resume naming nothing answers the one read, or is stale)
    """
CREATE TABLE lg_threads (
    thread_id TEXT PRIMARY KEY,
    created_by TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at {real} NOT NULL
);
CREATE TABLE lg_runs (
    run_id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL,
    assistant_id TEXT NOT NULL,
    status TEXT NOT NULL,
    modes TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL
);
CREATE INDEX lg_runs_by_thread ON lg_runs (thread_id, created_at);
CREATE TABLE lg_events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event TEXT NOT NULL,
    data TEXT NOT NULL,
    at {real} NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE lg_reads (
    thread_id TEXT NOT NULL,
    reader_key TEXT NOT NULL,
    interrupt_id TEXT NOT NULL,
    digest TEXT,
    at {real} NOT NULL,
    PRIMARY KEY (thread_id, reader_key)
);
""",
    # 25 (issue 32): a key's holder as one identity (core.identity), indexed, so the sources that
    #     name a person (a webhook, a polled inbox, the CLI) find their keys without reading
    #     every key; store.setup fills it for older keys (the skeleton is not SQL)
    """
ALTER TABLE api_keys ADD COLUMN identity TEXT;
CREATE INDEX IF NOT EXISTS api_keys_by_identity ON api_keys (identity);
""",
    # append here: "# n (issue k): why", never edit an entry that has shipped
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
