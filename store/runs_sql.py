"""The named statements over ``runs`` and ``run_events``; every transition ends in ``RETURNING *``
so the caller gets the new row without reading it again (SQLite 3.35+, Postgres).
"""

INSERT_RUN = """
INSERT INTO runs (thread_id, workflow, status, input, owner, lease_until, attempts,
                  created_at, updated_at, expires_in, requested_by, requester_key)
VALUES (:thread_id, :workflow, 'running', :input, :owner, :lease_until, 1, :now, :now,
        :expires_in, :requested_by, :requester_key)
ON CONFLICT (thread_id) DO NOTHING
RETURNING *
"""

MARK_WAITING = """
UPDATE runs SET status = 'waiting', interrupt_id = :interrupt_id,
       graph_interrupt_ids = :graph_interrupt_ids, request = :request, decision = NULL,
       owner = NULL, lease_until = NULL, updated_at = :now, expires_at = :expires_at,
       quorum = :quorum, separation = :separation, ladder_step = 0, ladder_at = :ladder_at,
       request_digest = :request_digest, authority = :authority,
       approver_groups = :approver_groups
WHERE thread_id = :thread_id AND status = :from_status AND owner = :owner
RETURNING *
"""

CLAIM = """
UPDATE runs SET status = 'resuming', decision = :decision, owner = :owner,
       lease_until = :lease_until, attempts = attempts + 1, updated_at = :now
WHERE thread_id = :thread_id AND status = 'waiting' AND interrupt_id = :interrupt_id
  AND (expires_at IS NULL OR expires_at > :now)
RETURNING *
"""

# The local inbox's copy of the request closes in the transition that ends its wait (a claim,
# expiry, cancellation), so no view shows a decided run's request as open. Another inbox keeps
# no row here and this changes nothing.
CLOSE_INBOX_REQUEST = """
UPDATE inbox_requests SET status = :request_status, decisions = :decisions,
       decided_by = :decided_by, answered_at = :now
WHERE id = :interrupt_id AND status = 'pending'
"""

# Who decided the request a run no longer waits on, and through which source.
LAST_CLAIM = """
SELECT actor, at, detail FROM run_events
WHERE thread_id = :thread_id AND reason = :reason ORDER BY id DESC LIMIT 1
"""

# The deadline passed with no claimed decision: the safe default outcome, once, whoever sweeps.
EXPIRE = """
UPDATE runs SET status = 'expired', result = :result, owner = NULL, lease_until = NULL,
       updated_at = :now
WHERE thread_id = :thread_id AND status = 'waiting' AND interrupt_id = :interrupt_id
  AND expires_at <= :now
RETURNING *
"""

# Reminder (step 1) and escalation (step 2) before the deadline: each once per pause, by whoever
# sweeps first; a step never goes backwards, and a later step also covers a skipped earlier one.
LADDER_STEP = """
UPDATE runs SET ladder_step = :step, ladder_at = :ladder_at
WHERE thread_id = :thread_id AND status = 'waiting' AND interrupt_id = :interrupt_id
  AND ladder_step < :step AND (expires_at IS NULL OR expires_at > :now)
RETURNING *
"""

# The rows whose next reminder or escalation (``ladder_at``, set when the run starts waiting
# and at each step) is due: a range of runs_ladder_idx, whatever the number waiting.
LIST_LADDER = """
SELECT thread_id, interrupt_id, updated_at, expires_at, ladder_step FROM runs
WHERE status = 'waiting' AND ladder_at <= :now AND expires_at > :now
ORDER BY ladder_at, thread_id
"""

# A listed row with nothing due under the current points (they changed since): when to look again.
REARM_LADDER = """
UPDATE runs SET ladder_at = :ladder_at
WHERE thread_id = :thread_id AND status = 'waiting' AND interrupt_id = :interrupt_id
"""

LIST_OVERDUE = """
SELECT thread_id, interrupt_id, expires_at FROM runs
WHERE status = 'waiting' AND expires_at <= :now
ORDER BY expires_at, thread_id
"""

# A run nobody is executing ends at once; one being executed gets an intent its runner honours.
CANCEL_NOW = """
UPDATE runs SET status = 'cancelled', cancel_reason = :reason, result = :result, owner = NULL,
       lease_until = NULL, updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status
RETURNING *
"""

REQUEST_CANCEL = """
UPDATE runs SET cancel_reason = :reason
WHERE thread_id = :thread_id AND status IN ('running', 'resuming') AND cancel_reason IS NULL
RETURNING *
"""

MARK_CANCELLED = """
UPDATE runs SET status = 'cancelled', result = :result, owner = NULL, lease_until = NULL,
       updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status AND owner = :owner
RETURNING *
"""

CANCEL_REASON = "SELECT cancel_reason FROM runs WHERE thread_id = :thread_id"

MARK_DONE = """
UPDATE runs SET status = 'done', result = :result, error = NULL, owner = NULL,
       lease_until = NULL, updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status AND owner = :owner
RETURNING *
"""

MARK_FAILED = """
UPDATE runs SET status = 'failed', error = :error, owner = NULL, lease_until = NULL,
       updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status AND owner = :owner
RETURNING *
"""

RENEW_LEASE = """
UPDATE runs SET lease_until = :lease_until
WHERE thread_id = :thread_id AND owner = :owner AND status IN ('running', 'resuming')
"""

# A lease that ran out belongs to a dead process; one sweeper takes it over, by the old owner.
RECLAIM = """
UPDATE runs SET owner = :owner, lease_until = :lease_until, attempts = attempts + 1,
       updated_at = :now
WHERE thread_id = :thread_id AND status = :from_status AND owner = :old_owner
  AND lease_until < :now
RETURNING *
"""

# A queued claim (``store.claimed``) is taken up by whoever comes first: the same conditional
# take-over, but it is the claim's own attempt, not another; ``updated_at`` stays the claim's,
# so the resume counts the time from the decision.
TAKE_UP = """
UPDATE runs SET owner = :owner, lease_until = :lease_until
WHERE thread_id = :thread_id AND status = :from_status AND owner = :old_owner
  AND lease_until < :now
RETURNING *
"""

LIST_EXPIRED = """
SELECT thread_id, status, owner, lease_until FROM runs
WHERE status IN ('running', 'resuming') AND lease_until < :now
ORDER BY lease_until, thread_id
"""

RETRY = """
UPDATE runs SET status = :to_status, owner = :owner, lease_until = :lease_until,
       attempts = attempts + 1, error = NULL, updated_at = :now
WHERE thread_id = :thread_id AND status = 'failed' AND attempts = :attempts
RETURNING *
"""

LIST_FAILED = """
SELECT thread_id, attempts, decision, updated_at FROM runs WHERE status = 'failed'
ORDER BY updated_at, thread_id
"""

COUNT_RUNNABLE = """
SELECT count(*) AS n FROM runs WHERE status IN ('running', 'resuming')
"""

GET_RUN = "SELECT * FROM runs WHERE thread_id = :thread_id"

LIST_WAITING = """
SELECT thread_id, interrupt_id, updated_at, expires_at, ladder_step FROM runs
WHERE status = 'waiting'
ORDER BY updated_at, thread_id
"""

# For the local inbox (same database): only the waiting runs whose request is answered. The
# planner starts from the answered requests (inbox_requests_status_idx) and joins each to its
# run (runs_interrupt_idx), so the cost follows the answered requests, not the waiting runs.
LIST_ANSWERED_WAITING = """
SELECT r.thread_id, r.interrupt_id, r.updated_at, r.expires_at, r.ladder_step
FROM inbox_requests i JOIN runs r ON r.interrupt_id = i.id
WHERE i.status = 'answered' AND r.status = 'waiting'
ORDER BY r.updated_at, r.thread_id
"""

# Escalations recorded since the run started waiting (its updated_at), i.e. of the current
# approval, not of an earlier pause on the same thread.
LIST_WAITING_WITH_ESCALATIONS = """
SELECT r.thread_id, r.interrupt_id, r.updated_at, r.expires_at, r.ladder_step,
       COUNT(e.id) AS escalations, MAX(e.at) AS escalated_at
FROM runs r
LEFT JOIN run_events e
       ON e.thread_id = r.thread_id AND e.reason = :escalated AND e.at >= r.updated_at
WHERE r.status = 'waiting'
GROUP BY r.thread_id, r.interrupt_id, r.updated_at, r.expires_at, r.ladder_step
ORDER BY r.updated_at, r.thread_id
"""

LIST_EVENTS = "SELECT * FROM run_events WHERE thread_id = :thread_id ORDER BY id"
