"""Migrations 1 to 19 as they shipped, kept apart so ``store.migrations`` stays readable.

Never edit one of these: a schema change is a new entry at the end of ``store.migrations``.
"""

from __future__ import annotations

_CHAIN_HEAD = """
CREATE OR REPLACE FUNCTION approval_chain_head(p_thread TEXT)
RETURNS TABLE (seq INTEGER, hash TEXT) LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN PERFORM pg_advisory_xact_lock(25, hashtext(p_thread)); RETURN QUERY
SELECT e.seq, e.hash FROM run_events e WHERE e.thread_id = p_thread AND e.seq IS NOT NULL
ORDER BY e.seq DESC LIMIT 1; END
$fn$
"""  # migration 19's function


SHIPPED_TO_19: list[str | dict[str, str]] = [
    # 1: the version table itself
    "CREATE TABLE IF NOT EXISTS approval_schema (version INTEGER NOT NULL)",
    # 2: runs, their audit trail, the refunds ledger, the local inbox
    """
CREATE TABLE IF NOT EXISTS runs (
    thread_id TEXT PRIMARY KEY,
    workflow TEXT NOT NULL,
    status TEXT NOT NULL,
    input TEXT,
    interrupt_id TEXT,
    graph_interrupt_ids TEXT,
    request TEXT,
    decision TEXT,
    result TEXT,
    error TEXT,
    owner TEXT,
    lease_until {real},
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_status_idx ON runs (status, updated_at);
CREATE INDEX IF NOT EXISTS runs_interrupt_idx ON runs (interrupt_id);

CREATE TABLE IF NOT EXISTS run_events (
    id {serial},
    thread_id TEXT NOT NULL,
    at {real} NOT NULL,
    actor TEXT NOT NULL,
    from_status TEXT,
    to_status TEXT,
    reason TEXT NOT NULL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS run_events_thread_idx ON run_events (thread_id, id);

CREATE TABLE IF NOT EXISTS refunds (
    refund_id TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    thread_id TEXT NOT NULL,
    order_id TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    reason TEXT NOT NULL,
    created_at {real} NOT NULL
);


CREATE TABLE IF NOT EXISTS inbox_requests (
    id TEXT PRIMARY KEY,
    external_id TEXT NOT NULL,
    dedupe_key TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    description TEXT NOT NULL,
    request TEXT NOT NULL,
    args_schemas TEXT NOT NULL,
    status TEXT NOT NULL,
    decisions TEXT,
    decided_by TEXT,
    created_at {real} NOT NULL,
    answered_at {real}
);



""",
    # 3: the conversation shown to reviewers
    "ALTER TABLE inbox_requests ADD COLUMN conversation TEXT",
    # 4: receipts, purchase orders, quorum approvals, the outbox and Vigilator creates (created
    #    here if an older release had not); deadlines, cancellation, duties, quorum, the ladder
    """
CREATE TABLE IF NOT EXISTS receipts (
    idempotency_key TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS purchase_orders (
    po_id TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    thread_id TEXT NOT NULL,
    cost_center TEXT NOT NULL,
    supplier_id TEXT NOT NULL,
    item TEXT NOT NULL,
    quantity INTEGER NOT NULL,
    unit_price_cents INTEGER NOT NULL,
    total_cents INTEGER NOT NULL,
    justification TEXT NOT NULL,
    created_at {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS purchase_orders_cost_center_idx ON purchase_orders (cost_center);
CREATE TABLE IF NOT EXISTS inbox_approvals (
    request_id TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    decisions TEXT NOT NULL,
    at {real} NOT NULL,
    PRIMARY KEY (request_id, reviewer)
);
CREATE INDEX IF NOT EXISTS inbox_requests_status_idx ON inbox_requests (status, created_at);
CREATE TABLE IF NOT EXISTS webhook_outbox (
    id {serial},
    message_id TEXT NOT NULL UNIQUE,
    url TEXT NOT NULL,
    event_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at {real} NOT NULL,
    delivered_at {real},
    last_error TEXT,
    created_at {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_outbox_due_idx ON webhook_outbox (delivered_at, next_attempt_at);
CREATE TABLE IF NOT EXISTS vigilator_requests (
    dedupe_key TEXT PRIMARY KEY,
    external_id TEXT NOT NULL,
    interrupt_id TEXT UNIQUE,
    body TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    sending_until {real},
    created_at {real} NOT NULL,
    opened_at {real}
);
CREATE INDEX IF NOT EXISTS vigilator_requests_external_idx ON vigilator_requests (external_id);
ALTER TABLE runs ADD COLUMN expires_in {real};
ALTER TABLE runs ADD COLUMN expires_at {real};
ALTER TABLE runs ADD COLUMN cancel_reason TEXT;
ALTER TABLE runs ADD COLUMN requested_by TEXT;
ALTER TABLE runs ADD COLUMN quorum INTEGER;
ALTER TABLE inbox_requests ADD COLUMN requested_by TEXT;
ALTER TABLE inbox_requests ADD COLUMN quorum INTEGER NOT NULL DEFAULT 1;
ALTER TABLE runs ADD COLUMN ladder_step INTEGER NOT NULL DEFAULT 0;
ALTER TABLE inbox_requests ADD COLUMN ladder TEXT
""",
    # 5: separation of duties fixed on the run at its pause; the local inbox keeps its own
    #    deadline and duties (it no longer reads ``runs``)
    """
ALTER TABLE inbox_requests ADD COLUMN expires_at {real};
ALTER TABLE inbox_requests ADD COLUMN separation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN separation INTEGER NOT NULL DEFAULT 0;
UPDATE inbox_requests SET expires_at = (
    SELECT runs.expires_at FROM runs WHERE runs.interrupt_id = inbox_requests.id
)
""",
    # 6: access: API keys, remembered webhook deliveries (replays), approvals given through the
    #    API (one row per approver), the digest of what a run asks reviewers
    """
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    digest TEXT NOT NULL,
    roles TEXT NOT NULL,
    created_at {real} NOT NULL,
    revoked_at {real},
    last_used_at {real}
);
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    source TEXT NOT NULL,
    message_id TEXT NOT NULL,
    received_at {real} NOT NULL,
    PRIMARY KEY (source, message_id)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_at_idx ON webhook_deliveries (received_at);
CREATE TABLE IF NOT EXISTS run_approvals (
    thread_id TEXT NOT NULL,
    interrupt_id TEXT NOT NULL,
    reviewer_key TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    decisions TEXT NOT NULL,
    at {real} NOT NULL,
    PRIMARY KEY (thread_id, interrupt_id, reviewer_key)
);
ALTER TABLE runs ADD COLUMN request_digest TEXT
""",
    # 7: retention (ops/retention.py): when a finished run's checkpoints were deleted, and the
    #    per-thread indexes that let a prune delete a run's rows without scanning
    """
ALTER TABLE runs ADD COLUMN checkpoints_pruned_at {real};
CREATE INDEX IF NOT EXISTS receipts_thread_idx ON receipts (thread_id);
CREATE INDEX IF NOT EXISTS refunds_thread_idx ON refunds (thread_id);
CREATE INDEX IF NOT EXISTS purchase_orders_thread_idx ON purchase_orders (thread_id);
CREATE INDEX IF NOT EXISTS inbox_requests_external_idx ON inbox_requests (external_id);
CREATE INDEX IF NOT EXISTS webhook_outbox_created_idx ON webhook_outbox (created_at)
""",
    # 8: the web inbox: signed-in browser sessions (the id stored as a digest), and the index the
    #    queue pages through (waiting runs, most urgent first)
    """
CREATE TABLE IF NOT EXISTS web_sessions (
    id_digest TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    roles TEXT NOT NULL,
    via TEXT NOT NULL,
    csrf TEXT NOT NULL,
    created_at {real} NOT NULL,
    expires_at {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS web_sessions_expires_idx ON web_sessions (expires_at);
CREATE INDEX IF NOT EXISTS runs_queue_idx ON runs (status, expires_at, thread_id)
""",
    # 9: when a waiting run's next reminder or escalation is due, so a sweep reads the due ones
    #    off an index; runs already waiting are due now (the next sweep sets each one's point)
    """
ALTER TABLE runs ADD COLUMN ladder_at {real};
UPDATE runs SET ladder_at = updated_at WHERE status = 'waiting' AND ladder_step < 2;
CREATE INDEX IF NOT EXISTS runs_ladder_idx ON runs (status, ladder_at)
""",
    # 10: one approvals table (``run_approvals``) takes the local inbox's approvals of waiting
    #     runs; copies of requests whose runs no longer wait are closed (decided elsewhere)
    """
INSERT INTO run_approvals (thread_id, interrupt_id, reviewer_key, reviewer, decisions, at)
SELECT r.thread_id, a.request_id, LOWER(TRIM(a.reviewer)), a.reviewer, a.decisions, a.at
FROM inbox_approvals a JOIN runs r ON r.interrupt_id = a.request_id
WHERE r.status = 'waiting'
ON CONFLICT (thread_id, interrupt_id, reviewer_key) DO NOTHING;
DROP TABLE inbox_approvals;
UPDATE inbox_requests SET status = 'answered'
WHERE status IN ('pending', 'decided elsewhere') AND NOT EXISTS (
    SELECT 1 FROM runs r WHERE r.interrupt_id = inbox_requests.id AND r.status = 'waiting')
""",  # 11: authority (issue 25): keys and sessions carry groups, a run fixes its bands when
    #     it pauses; each event has its place in its run's hash chain, and retention records
    #     what it pruned so the rest still verifies
    """
ALTER TABLE api_keys ADD COLUMN groups TEXT NOT NULL DEFAULT '';
ALTER TABLE web_sessions ADD COLUMN groups TEXT;
ALTER TABLE runs ADD COLUMN authority TEXT;
ALTER TABLE run_events ADD COLUMN seq INTEGER;
ALTER TABLE run_events ADD COLUMN prev_hash TEXT;
ALTER TABLE run_events ADD COLUMN hash TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS run_events_chain_idx ON run_events (thread_id, seq);
CREATE TABLE IF NOT EXISTS audit_pruned (
    thread_id TEXT PRIMARY KEY,
    events INTEGER NOT NULL,
    head_hash TEXT,
    pruned_at {real} NOT NULL
)
""",
    # 12: partial answers to a pause's several interrupts, one row per action, first one wins
    """
CREATE TABLE IF NOT EXISTS run_answers (
    thread_id TEXT NOT NULL,
    interrupt_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    reviewer TEXT NOT NULL,
    decision TEXT NOT NULL,
    source TEXT NOT NULL,
    at {real} NOT NULL,
    PRIMARY KEY (thread_id, interrupt_id, position)
)
""",
    # 13: deliveries in order per thread (issue 24): a thread's later event waits for its earlier
    """
ALTER TABLE webhook_outbox ADD COLUMN thread_key TEXT;
CREATE INDEX IF NOT EXISTS webhook_outbox_thread_idx ON webhook_outbox (url, thread_key, id)
""",
    # 14: Slack (issue 24): which reviewer each Slack user is, the interactions already taken
    #     (replays refused), and the message that shows each request (updated with the outcome)
    """
CREATE TABLE IF NOT EXISTS slack_links (
    slack_user TEXT PRIMARY KEY,
    reviewer TEXT NOT NULL,
    linked_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS slack_seen (
    signature TEXT PRIMARY KEY,
    expires_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS slack_messages (
    interrupt_id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    ts TEXT NOT NULL
)
""",
    # 15: business limits under concurrency: each order's refunded and each cost center's
    #     committed total, one row each, changed only by a conditional UPDATE (created on first
    #     use); the rate limiter's counters, per caller, action and window, shared by processes
    """
CREATE TABLE IF NOT EXISTS order_balances (
    order_id TEXT PRIMARY KEY,
    total_cents INTEGER NOT NULL,
    refunded_cents INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_order_idx ON refunds (order_id);
CREATE TABLE IF NOT EXISTS budget_balances (
    cost_center TEXT PRIMARY KEY,
    budget_cents INTEGER NOT NULL,
    committed_cents INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rate_limits (
    bucket TEXT NOT NULL,
    window_start {real} NOT NULL,
    hits INTEGER NOT NULL,
    PRIMARY KEY (bucket, window_start)
);
CREATE INDEX IF NOT EXISTS rate_limits_window_idx ON rate_limits (window_start);
CREATE INDEX IF NOT EXISTS runs_requester_idx ON runs (requested_by, status)
""",
    # 16: delegation (issue 25): a reviewer lends the groups they hold to one person for a
    #     period; an approval records who acted (``actor_key``) beside whose authority counts
    #     (``reviewer_key``); a waiting run keeps the groups that may approve it ("waiting on me")
    """
CREATE TABLE IF NOT EXISTS delegations (
    id TEXT PRIMARY KEY,
    delegator TEXT NOT NULL,
    delegator_key TEXT NOT NULL,
    delegate TEXT NOT NULL,
    delegate_key TEXT NOT NULL,
    groups TEXT NOT NULL,
    starts_at {real} NOT NULL,
    ends_at {real} NOT NULL,
    revoked_at {real},
    created_by TEXT NOT NULL,
    created_at {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS delegations_delegate_idx ON delegations (delegate_key, ends_at);
CREATE INDEX IF NOT EXISTS delegations_delegator_idx ON delegations (delegator_key, ends_at);
ALTER TABLE run_approvals ADD COLUMN actor_key TEXT;
ALTER TABLE runs ADD COLUMN approver_groups TEXT
""",
    # 17 (issue 25): signed anchors over the heads of the runs' chains, written by the sweep
    #     every AUDIT_ANCHOR_EVERY (``store.anchors``); events by time, runs by request time
    #     (exports, anchors and the decision-time metrics read bounded windows)
    """
CREATE TABLE IF NOT EXISTS audit_anchors (
    seq INTEGER PRIMARY KEY,
    at {real} NOT NULL,
    last_event_id BIGINT NOT NULL,
    heads TEXT NOT NULL,
    digest TEXT NOT NULL,
    prev_mac TEXT NOT NULL,
    mac TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_anchors_at_idx ON audit_anchors (at);
CREATE INDEX IF NOT EXISTS run_events_at_idx ON run_events (at);
CREATE INDEX IF NOT EXISTS runs_created_idx ON runs (created_at)
""",
    # 18: e-mail (issue 24): the address a reviewer's key is mailed at, and each reviewer's use
    #     of a request's signed links, one row per request and reviewer, so a link decides once
    #     (rows go once the request's deadline, and so the links', is over)
    """
ALTER TABLE api_keys ADD COLUMN email TEXT;
CREATE TABLE IF NOT EXISTS email_links_used (
    interrupt_id TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    action TEXT NOT NULL,
    used_at {real} NOT NULL,
    expires_at {real} NOT NULL,
    PRIMARY KEY (interrupt_id, reviewer)
)
""",
    # 19 (issue 26), Postgres only: a run's audit-chain head read under the chain's lock in one
    #     call (VOLATILE: a fresh snapshot after the lock), so a transition reads it in its own
    #     UPDATE; ';' stays off the body's line ends, where ``pending`` splits
    {"postgres": _CHAIN_HEAD},
]
