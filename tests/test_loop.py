"""The durable loop through real processes: run.py pauses and exits, a reviewer decides, recover.py
resumes, and the ledger holds the effect exactly once."""

from __future__ import annotations

import re

import pytest
from conftest import run_cli

from agent.ledger import Ledger
from store.runs import RunStore

PAUSED = re.compile(r"^paused on interrupt ([0-9a-f-]{36}) - state saved, exiting$")
REQUEST = "Refund order A-1001: the kettle arrived broken"


def start(thread_id: str, text: str = REQUEST) -> str:
    proc = run_cli("run.py", text, "--thread-id", thread_id)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    match = PAUSED.match(lines[0])
    assert match, lines[0]
    return match.group(1)


def test_approve_loop_through_processes(store):
    interrupt_id = start("t-approve")
    runs = RunStore(store.db)
    run = runs.get("t-approve")
    # run.py has exited (subprocess.run returned) and the row says the run waits on the request.
    assert (run.status, run.interrupt_id, run.owner) == ("waiting", interrupt_id, None)
    assert run.request.to_json()["action_requests"][0]["name"] == "issue_refund"
    assert run.request.to_json()["review_configs"][0]["allowed_decisions"] == [
        "approve",
        "edit",
        "reject",
    ]

    listed = run_cli("recover.py", "--list").stdout
    assert re.match(rf"^t-approve  waiting on {interrupt_id}  \(\d+s\)$", listed.strip())

    assert interrupt_id in run_cli("inbox", "list").stdout
    run_cli("inbox", "approve", interrupt_id, "--by", "alice")

    out = run_cli("recover.py").stdout
    assert out.startswith("t-approve  Refunded 49.90 EUR for order A-1001"), out
    assert runs.get("t-approve").status == "done"
    refunds = Ledger(store.db).refunds("t-approve")
    assert [(r["order_id"], r["amount_cents"]) for r in refunds] == [("A-1001", 4990)]

    # A second sweep finds nothing to do and the ledger is unchanged.
    assert run_cli("recover.py").stdout == ""
    assert len(Ledger(store.db).refunds()) == 1
    assert run_cli("recover.py", "--list").stdout.strip() == "no waiting runs"


def test_reject_ends_with_the_reason_and_no_refund(store):
    interrupt_id = start("t-reject")
    run_cli("inbox", "reject", interrupt_id, "--reason", "outside the return window")
    out = run_cli("recover.py").stdout
    assert out.strip() == (
        "t-reject  The refund was declined by the reviewer: outside the return window"
    )
    assert RunStore(store.db).get("t-reject").status == "done"
    assert Ledger(store.db).refunds() == []


def test_edit_issues_the_reviewers_arguments(store):
    interrupt_id = start("t-edit")
    edited = '{"order_id": "A-1001", "amount": 25.5, "reason": "partial refund, kettle works"}'
    run_cli("inbox", "edit", interrupt_id, "--args", edited)
    out = run_cli("recover.py").stdout
    assert "Refunded 25.50 EUR for order A-1001" in out
    [refund] = Ledger(store.db).refunds()
    assert (refund["amount_cents"], refund["reason"]) == (2550, "partial refund, kettle works")


def test_run_again_with_the_same_thread_reports_instead_of_starting(store):
    interrupt_id = start("t-twice")
    proc = run_cli("run.py", REQUEST, "--thread-id", "t-twice")
    assert proc.stdout.strip() == (
        f"run t-twice already exists (waiting): paused on interrupt {interrupt_id}"
        " - state saved, exiting"
    )
    assert len(store.db.all("SELECT id FROM inbox_requests")) == 1
    assert len(RunStore(store.db).events("t-twice")) == 2  # started, paused


def test_a_request_without_an_order_finishes_without_approval(store):
    proc = run_cli("run.py", "Please refund me", "--thread-id", "t-none")
    assert proc.stdout.startswith("Which order is this about?")
    assert RunStore(store.db).get("t-none").status == "done"
    assert store.db.all("SELECT id FROM inbox_requests") == []


@pytest.mark.parametrize("order", ["A-9999"])
def test_unknown_order_is_answered_not_refunded(store, order):
    proc = run_cli("run.py", f"Refund order {order}: broken", "--thread-id", "t-unknown")
    assert proc.stdout.strip() == f"I could not find that order: no order {order}."
    assert Ledger(store.db).refunds() == []
