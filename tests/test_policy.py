"""The approval policy holds whatever the source of a decision: edits are judged again (a raised
amount needs the quorum; a locked argument cannot change), and one bad row never stops a sweep."""

from __future__ import annotations

import json

import pytest

from agent.ledger import Ledger
from core.errors import UserError
from testkit.decide import answer
from worker.decisions import Pending


def _edit(args: dict) -> list[dict]:
    return [{"type": "edit", "edited_action": {"name": "issue_refund", "args": args}}]


def test_an_edit_over_the_quorum_amount_needs_a_second_approver(runner, monkeypatch):
    monkeypatch.setenv("REFUND_QUORUM_AMOUNT", "30")
    monkeypatch.setenv("REFUND_QUORUM", "2")
    paused = runner.start("Refund order A-1001: broken", thread_id="t-up")
    # the agent proposed a partial 20.00 (one approver); an edit to 45.00 is still refundable
    request = runner.runs.get("t-up").request.to_json()
    request["action_requests"][0]["args"]["amount"] = 20.0
    runner.store.db.execute(
        "UPDATE runs SET request = :r, quorum = 1 WHERE thread_id = 't-up'",
        {"r": json.dumps(request)},
    )
    raised = _edit({"order_id": "A-1001", "amount": 45.0, "reason": "goodwill"})
    counted = answer(runner, paused.interrupt_id, raised, "alice")
    assert counted == Pending(["alice"], 2)  # the edit judged again: 45.00 needs two
    assert runner.sweep() == []
    request = runner.inbox.get(paused.interrupt_id)
    assert request.status == "pending" and request.approvers == ["alice"]
    assert runner.runs.get("t-up").status == "waiting"
    with pytest.raises(UserError, match="must agree"):
        answer(runner, paused.interrupt_id, [{"type": "approve"}], "bob")
    answer(runner, paused.interrupt_id, raised, "bob")
    [done] = runner.sweep()
    assert done.status == "done"
    claim = [e for e in runner.runs.events("t-up") if e.reason == "decision claimed"]
    assert claim[0].detail["approvers"] == ["alice", "bob"]


def test_a_locked_argument_cannot_be_edited(runner):
    paused = runner.start("Refund order A-1001: broken", thread_id="t-lock")
    other_order = _edit({"order_id": "A-1004", "amount": 40.0, "reason": "x"})
    with pytest.raises(UserError, match="order_id of issue_refund may not be changed"):
        answer(runner, paused.interrupt_id, other_order, "alice")
    config = runner.runs.get("t-lock").request.to_json()["review_configs"][0]
    assert config["locked_arguments"] == ["order_id"]
    same_order = _edit({"order_id": "A-1001", "amount": 10.0, "reason": "partial"})
    answer(runner, paused.interrupt_id, same_order, "alice")
    [done] = runner.sweep()
    assert (
        done.status == "done"
        and Ledger(runner.store.db).refunds("t-lock")[0]["amount_cents"] == 1000
    )


def test_a_sweep_over_a_poisoned_row_finishes_every_other_row(runner):
    for n, order in ((1, "A-1001"), (2, "A-1002"), (3, "A-1005")):
        paused = runner.start(f"Refund order {order}: broken", thread_id=f"t-row{n}")
        answer(runner, paused.interrupt_id, [{"type": "approve"}], "alice")
    runner.store.db.execute("UPDATE runs SET request = '{not json' WHERE thread_id = 't-row2'")
    outcomes = runner.sweep()
    assert sorted(o.thread_id for o in outcomes) == ["t-row1", "t-row3"]
    assert {o.status for o in outcomes} == {"done"}
    skipped = [e for e in runner.runs.events("t-row2") if e.reason == "sweep skipped the run"]
    assert len(skipped) == 1 and "JSONDecodeError" in skipped[0].detail["error"]
    row = runner.store.db.one("SELECT status FROM runs WHERE thread_id = 't-row2'")
    assert row["status"] == "resuming"  # left as it was, for an operator to look at
