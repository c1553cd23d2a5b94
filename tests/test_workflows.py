"""Both built-in workflows through pause, decision and resume; the policy's threshold in code;
mixed decisions in one interrupt; edits that try to leave the tool's schema or switch tools."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from agent.ledger import Ledger
from core.errors import UserError
from testkit.decide import answer, claim
from worker.runner import Runner

PO_REQUEST = "Order 4 toner cartridges for CC-100: the printers are empty"


def test_purchase_order_pauses_and_resumes_with_the_order_placed_once(runner: Runner):
    paused = runner.start(PO_REQUEST, thread_id="t-po", workflow="purchase-order")
    assert paused.status == "waiting", paused
    run = runner.runs.get("t-po")
    [action] = run.request.to_json()["action_requests"]
    assert action["name"] == "create_purchase_order"
    assert action["args"] == {
        "cost_center": "CC-100",
        "supplier_id": "SUP-01",  # cheaper than SUP-02 for toner
        "item": "toner cartridge",
        "quantity": 4,
        "unit_price": "79.00",  # money as exact text, never a float
        "justification": "the printers are empty",
    }
    approval = runner.inbox.get(paused.interrupt_id)
    assert approval.description.startswith(f"Request: {PO_REQUEST}")
    tools_seen = [m["name"] for m in approval.conversation if m["role"] == "tool"]
    assert tools_seen == ["check_budget", "find_supplier"]
    assert Ledger(runner.store.db).purchase_orders() == []

    answer(runner, paused.interrupt_id, [{"type": "approve"}], "bob")
    [done] = runner.sweep()
    [po] = Ledger(runner.store.db).purchase_orders("t-po")
    assert done.result == (
        "Ordered 4 x toner cartridge from Northwind Office Supply for 316.00 EUR on CC-100 "
        f"(purchase order {po['po_id']})."
    )
    assert (po["total_cents"], po["unit_price_cents"], po["quantity"]) == (31600, 7900, 4)
    assert runner.sweep() == [] and len(Ledger(runner.store.db).purchase_orders()) == 1


@pytest.mark.parametrize(
    ("workflow", "text", "result"),
    [
        ("refund", "Refund order A-1003: the pan cracked", "Refunded 15.50 EUR for order A-1003"),
        (
            "purchase-order",
            "Order 2 printer paper for CC-300: running low",
            "Ordered 2 x printer paper from Northwind Office Supply for 9.00 EUR on CC-300",
        ),
    ],
)
def test_under_the_threshold_completes_with_no_reviewer(runner: Runner, workflow, text, result):
    outcome = runner.start(text, thread_id="t-small", workflow=workflow)
    assert outcome.status == "done" and outcome.result.startswith(result), outcome
    assert runner.store.db.all("SELECT id FROM inbox_requests") == []
    ledger = Ledger(runner.store.db)
    assert len(ledger.refunds() if workflow == "refund" else ledger.purchase_orders()) == 1


def test_the_threshold_is_a_setting(store, monkeypatch):
    monkeypatch.setenv("REFUND_APPROVAL_THRESHOLD", "0")  # review everything
    assert Runner(store).start("Refund order A-1003: cracked", thread_id="t-0").status == "waiting"
    monkeypatch.setenv("REFUND_APPROVAL_THRESHOLD", "500")
    assert Runner(store).start("Refund order A-1002: loud", thread_id="t-500").status == "done"
    monkeypatch.setenv("REFUND_APPROVAL_THRESHOLD", "twenty")
    with pytest.raises(UserError, match="REFUND_APPROVAL_THRESHOLD='twenty' must be an amount"):
        Runner(store).start("Refund order A-1003: cracked", thread_id="t-bad")
    assert store.db.one("SELECT * FROM runs WHERE thread_id = 't-bad'") is None


def test_a_change_of_threshold_while_waiting_does_not_skip_the_review(store, monkeypatch):
    runner = Runner(store)
    paused = runner.start("Refund order A-1001: broken", thread_id="t-change")
    monkeypatch.setenv("REFUND_APPROVAL_THRESHOLD", "1000")
    answer(runner, paused.interrupt_id, [{"type": "reject", "message": "no"}], "alice")
    [done] = Runner(store).sweep()
    assert done.result == "The refund was declined by the reviewer: no"
    assert Ledger(store.db).refunds() == []


def test_mixed_decisions_on_several_actions_in_one_interrupt(runner: Runner):
    paused = runner.start("Refund orders A-1001 and A-1005: both damaged", thread_id="t-mixed")
    actions = runner.runs.get("t-mixed").request.to_json()["action_requests"]
    assert [(a["name"], a["args"]["order_id"]) for a in actions] == [
        ("issue_refund", "A-1001"),
        ("issue_refund", "A-1005"),
    ]
    decisions = [
        {"type": "edit", "args": {"order_id": "A-1001", "amount": 10, "reason": "goodwill"}},
        {"type": "reject", "message": "customer kept it"},
    ]
    run_cli("inbox", "decide", paused.interrupt_id, "--decisions", json.dumps(decisions))
    [done] = runner.sweep()
    [refund] = Ledger(runner.store.db).refunds()
    assert (refund["order_id"], refund["amount_cents"]) == ("A-1001", 1000)
    assert done.result == (
        f"Refunded 10.00 EUR for order A-1001 (refund {refund['refund_id']}). A reviewer edited "
        "it before it ran. The refund was declined by the reviewer: customer kept it"
    )


def test_an_edit_cannot_switch_tools_or_leave_the_schema(runner: Runner):
    paused = runner.start("Refund order A-1002: grinder is loud", thread_id="t-edit")
    switch = {"type": "edit", "edited_action": {"name": "lookup_order", "args": {"order_id": "x"}}}
    bad = {
        "type": "edit",
        "edited_action": {"name": "issue_refund", "args": {"order_id": "A-1002", "amount": 0}},
    }
    with pytest.raises(UserError, match="an edit must keep the tool issue_refund"):
        answer(runner, paused.interrupt_id, [switch], "mallory")
    with pytest.raises(UserError, match="invalid arguments for issue_refund"):
        answer(runner, paused.interrupt_id, [bad], "mallory")
    assert not runner.inbox.get(paused.interrupt_id).answered
    # A decision that bypasses the inbox is refused by the claim the same way.
    for decision in (switch, bad):
        refused = claim(runner, "t-edit", paused.interrupt_id, {"decisions": [decision]})
        assert refused.message.startswith("invalid decision")
    assert runner.runs.get("t-edit").status == "waiting"
    assert Ledger(runner.store.db).refunds() == []


def test_an_older_database_is_migrated(backend):
    from store.db import open_store
    from store.migrations import SCHEMA_VERSION

    with open_store() as store:  # a run waits, then the database is made to look like version 2
        before = Runner(store).start("Refund order A-1001: broken", thread_id="t-before")
        assert before.status == "waiting"
        store.db.execute("DROP INDEX IF EXISTS runs_queue_idx")  # on columns dropped below
        store.db.execute("DROP INDEX IF EXISTS runs_ladder_idx")
        store.db.execute("DROP INDEX IF EXISTS runs_requester_idx")
        store.db.execute("DROP INDEX IF EXISTS runs_requester_key_idx")
        store.db.execute("DROP INDEX IF EXISTS run_events_chain_idx")
        store.db.execute("ALTER TABLE inbox_requests DROP COLUMN conversation")
        for table, column in (
            ("runs", "expires_in"),
            ("runs", "expires_at"),
            ("runs", "cancel_reason"),
            ("runs", "requested_by"),
            ("runs", "requester_key"),
            ("runs", "traceparent"),
            ("runs", "quorum"),
            ("runs", "ladder_step"),
            ("inbox_requests", "requested_by"),
            ("inbox_requests", "quorum"),
            ("inbox_requests", "ladder"),
            ("inbox_requests", "expires_at"),
            ("inbox_requests", "separation"),
            ("runs", "separation"),
            ("runs", "request_digest"),
            ("runs", "checkpoints_pruned_at"),
            ("runs", "ladder_at"),
            ("runs", "authority"),
            ("runs", "approver_groups"),
            ("run_events", "seq"),
            ("run_events", "prev_hash"),
            ("run_events", "hash"),
        ):
            store.db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        for table in (
            "api_keys",
            "webhook_deliveries",
            "run_approvals",
            "web_sessions",
            "webhook_outbox",
            "delegations",
            "slack_links",
            "slack_link_codes",
            "approved_amounts",
            "audit_anchors",
            "halts",
            "lg_threads",
            "lg_runs",
            "lg_events",
            "lg_reads",
        ):
            store.db.execute(f"DROP TABLE {table}")
        store.db.execute("UPDATE approval_schema SET version = 2")
    with open_store() as store:
        assert store.db.one("SELECT version FROM approval_schema")["version"] == SCHEMA_VERSION
        outcome = Runner(store).start("Refund order A-1001: broken", thread_id="t-migrated")
        assert Runner(store).inbox.get(outcome.interrupt_id).conversation[0]["role"] == "user"
        run = Runner(store).runs.get("t-migrated")
        assert run.expires_at is not None and run.quorum == 1 and run.ladder_step == 0
        # a run that was waiting is due for the ladder at once: the next sweep sets its point
        ladder = store.db.one("SELECT ladder_at, updated_at FROM runs WHERE thread_id = 't-before'")
        assert ladder["ladder_at"] == ladder["updated_at"]


def test_each_store_checks_an_edit_against_its_own_ledger(tmp_path):
    """A process with two stores (the suite, the bench, a host that opens one per tenant): a
    built-in workflow's check reads the ledger of the store the decision is made on, not the
    one whose graph was built last, nor one that has been closed since. CI saw a claimer of
    ``test_claims`` fail with "the pool is closed" from a ledger another claimer had closed."""
    from decimal import Decimal

    from store.db import open_store
    from testkit.databases import environment

    refund = {"order_id": "A-1001", "amount": "49.90", "reason": "damaged"}
    with environment({"SQLITE_PATH": str(tmp_path / "a.db")}), open_store() as a:
        ours = Runner(a)
        ours.graph("refund")
        with environment({"SQLITE_PATH": str(tmp_path / "b.db")}), open_store() as b:
            other = Runner(b)
            other.graph("refund")  # built last: before, every store's checks read its ledger
            Ledger(b.db).issue_refund(
                idempotency_key="k-b",
                thread_id="t-b",
                order_id="A-1001",
                amount=Decimal("49.90"),
                reason="damaged",
                order_total=Decimal("49.90"),
            )
            ours.graphs.workflow("refund").check_edit("issue_refund", refund)  # nothing refunded
            with pytest.raises(UserError, match="more than is still refundable"):
                other.graphs.workflow("refund").check_edit("issue_refund", refund)
        ours.graphs.workflow("refund").check_edit("issue_refund", refund)  # b closed: no matter
