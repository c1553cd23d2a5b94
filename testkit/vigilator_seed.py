"""Runs waiting on a fake Vigilator's interrupts without a graph run for each: a sweep over
thousands of them (``tests/test_vigilator.py``, ``bench.vigilator_sweep``) only reads."""

from __future__ import annotations

import json
import time

from testkit.fake_vigilator import FakeVigilator

SEED_WAITING_RUN = """
INSERT INTO runs (thread_id, workflow, status, input, interrupt_id, graph_interrupt_ids,
                  request, attempts, created_at, updated_at)
VALUES (:thread_id, 'refund', 'waiting', :input, :interrupt_id, '[]', :request, 1, :now, :now)
"""


def seed_waiting_runs(db, fake: FakeVigilator, n: int, prefix: str = "t-seed") -> list[str]:
    """``n`` runs waiting on ``n`` pending interrupts, without running a graph for each
    (a sweep over them only reads; none is answered). Returns the interrupt ids."""
    action = {
        "name": "issue_refund",
        "args": {"order_id": "A-1001", "amount": 1.0},
        "allowedDecisions": ["approve", "reject"],
    }
    request = json.dumps(
        {
            "action_requests": [{"name": "issue_refund", "args": action["args"]}],
            "review_configs": [
                {"action_name": "issue_refund", "allowed_decisions": ["approve", "reject"]}
            ],
        }
    )
    ids = []
    now = time.time()
    with db.transaction() as tx:
        for i in range(n):
            thread_id = f"{prefix}-{i:05d}"
            record = fake.create(
                {
                    "title": "Approve a seeded refund",
                    "description": "seeded for a sweep",
                    "externalId": f"approval-worker:{thread_id}",
                    "actionRequests": [action],
                }
            )
            tx.execute(
                SEED_WAITING_RUN,
                {
                    "thread_id": thread_id,
                    "input": '{"text": "seeded"}',
                    "interrupt_id": record["id"],
                    "request": request,
                    "now": now,
                },
            )
            ids.append(record["id"])
    return ids
