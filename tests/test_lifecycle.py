"""Approval lifecycle: deadlines and safe expiry, driven by an injected clock (no sleeps)."""

from __future__ import annotations

import json
import threading

import pytest
from conftest import run_cli

from agent.ledger import Ledger
from core.errors import UserError
from store.receipts import Receipts
from testkit.clock import HOUR, runner_at, waiting
from testkit.decide import answer, claim
from testkit.wait import past
from worker.decisions import Applied, Pending
from worker.refusals import Refusal, Refused
from worker.runner import Runner


def test_the_policy_window_applies_and_a_run_can_override_it(store, clock, monkeypatch):
    monkeypatch.setenv("REFUND_APPROVAL_EXPIRES_IN", "48h")
    runner = runner_at(store, clock)
    waiting(runner, "t-policy")
    waiting(runner, "t-short", expires_in="2h")
    assert runner.runs.get("t-policy").expires_at == clock.now + 48 * HOUR
    assert runner.runs.get("t-short").expires_at == clock.now + 2 * HOUR
    with pytest.raises(UserError, match="not a duration"):
        runner.start("Refund order A-1004: x", thread_id="t-bad", expires_in="soon")


def test_an_overdue_run_expires_once_with_two_sweepers_and_nothing_executes(store, clock):
    first = runner_at(store, clock)
    second = runner_at(store, clock)
    outcome = waiting(first, "t-exp", expires_in="1h")
    assert first.sweep() == [] and first.runs.get("t-exp").status == "waiting"

    clock.now += HOUR
    barrier = threading.Barrier(2)
    results: list = []

    def sweep(r: Runner) -> None:
        barrier.wait()
        results.append(r.sweeper.expire_overdue())

    threads = [threading.Thread(target=sweep, args=(r,)) for r in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expired = [o for batch in results for o in batch]
    assert [o.status for o in expired] == ["expired"]
    run = first.runs.get("t-exp")
    assert run.status == "expired" and "expired" in run.result and "nothing was done" in run.result
    assert [e.reason for e in first.runs.events("t-exp")].count("expired") == 1
    assert Ledger(store.db).refunds("t-exp") == []
    assert first.inbox.get(outcome.interrupt_id).status == "expired"
    with pytest.raises(UserError, match="expired"):
        answer(first, outcome.interrupt_id, [{"type": "approve"}], "alice")


@pytest.mark.parametrize("offset", [-0.001, 0.0], ids=["just-before", "at-deadline"])
def test_a_decision_racing_the_deadline_claims_or_is_refused_never_both(store, clock, offset):
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-race", expires_in="1h")
    clock.now += HOUR + offset
    barrier = threading.Barrier(2)
    got: dict[str, object] = {}

    def decide() -> None:
        barrier.wait()
        decision = {"decisions": [{"type": "approve"}]}
        got["claim"] = claim(runner, "t-race", outcome.interrupt_id, decision)

    def sweep() -> None:
        barrier.wait()
        got["expired"] = runner.sweeper.expire_overdue()

    threads = [threading.Thread(target=decide), threading.Thread(target=sweep)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    status = runner.runs.get("t-race").status
    reasons = [e.reason for e in runner.runs.events("t-race")]
    if offset < 0:
        assert (
            not isinstance(got["claim"], Refused) and got["expired"] == [] and status == "resuming"
        )
        assert "expired" not in reasons
    else:
        assert isinstance(got["claim"], Refused) and got["claim"].reason == Refusal.EXPIRED
        assert status == "expired"
        assert "decision claimed" not in reasons
        assert reasons[-1] == "expired"  # the refusal itself changed no table


def test_a_late_inbox_answer_is_refused_with_exit_2_and_changes_nothing(store, monkeypatch):
    runner = Runner(store)
    outcome = waiting(runner, "t-late", expires_in="1s")
    store.db.execute(
        "UPDATE runs SET expires_at = expires_at - 10 WHERE thread_id = :t", {"t": "t-late"}
    )  # the deadline is in the past for the CLI's real clock (the run's and the inbox's copy)
    store.db.execute(
        "UPDATE inbox_requests SET expires_at = expires_at - 10 WHERE id = :i",
        {"i": outcome.interrupt_id},
    )
    before = runner.runs.events("t-late")
    proc = run_cli("inbox", "approve", outcome.interrupt_id, "--by", "bob", check_rc=2)
    assert "this request expired on " in proc.stderr and "Traceback" not in proc.stderr
    assert runner.inbox.get(outcome.interrupt_id).status == "pending"
    assert runner.runs.events("t-late") == before
    out = run_cli("recover.py").stdout
    assert out.startswith("t-late  The approval expired at "), out
    assert runner.runs.get("t-late").status == "expired"


# -- cancellation ---------------------------------------------------------------------------


def test_cancel_a_waiting_run_closes_its_request(store, clock):
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-cancel-wait")
    message = runner.cancel("t-cancel-wait", "customer withdrew")
    assert message == "Cancelled (customer withdrew); nothing was done."
    run = runner.runs.get("t-cancel-wait")
    assert run.status == "cancelled" and run.cancel_reason == "customer withdrew"
    assert runner.inbox.get(outcome.interrupt_id).status == "cancelled"
    with pytest.raises(UserError, match="cancelled"):
        answer(runner, outcome.interrupt_id, [{"type": "approve"}], "alice")
    decision = {"decisions": [{"type": "approve"}]}
    assert isinstance(claim(runner, "t-cancel-wait", outcome.interrupt_id, decision), Refused)
    assert runner.sweep() == [] and Ledger(store.db).refunds("t-cancel-wait") == []


def test_cancel_a_finished_run_is_refused(store, clock):
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-cancel-done")
    answer(runner, outcome.interrupt_id, [{"type": "approve"}], "alice")
    [done] = runner.sweep()
    assert done.status == "done"
    with pytest.raises(Refused, match="already done"):
        runner.cancel("t-cancel-done")
    assert runner.runs.get("t-cancel-done").status == "done"


def test_cancel_a_resuming_run_before_its_first_step_runs_nothing(store, clock):
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-cancel-early")
    decision = {"decisions": [{"type": "approve"}]}
    claimed = claim(runner, "t-cancel-early", outcome.interrupt_id, decision)
    assert isinstance(claimed, Applied)
    assert "next step" in runner.cancel("t-cancel-early", "wrong order")
    result = runner.resume_claimed(claimed.run)
    assert result.status == "cancelled" and result.result.endswith("nothing was done.")
    assert Ledger(store.db).refunds("t-cancel-early") == []


def test_cancel_mid_run_reports_the_refund_already_issued_and_never_repeats_it(
    store, clock, monkeypatch
):
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-cancel-mid")
    answer(runner, outcome.interrupt_id, [{"type": "approve"}], "alice")
    once = Receipts.once  # the graph's tools record through their own Receipts

    def once_then_cancel(self, *args, **kwargs):
        result = once(self, *args, **kwargs)
        runner.cancel("t-cancel-mid", "fraud suspected")  # arrives while the run executes
        return result

    monkeypatch.setattr(Receipts, "once", once_then_cancel)
    [cancelled] = runner.sweep()
    monkeypatch.setattr(Receipts, "once", once)
    [refund] = Ledger(store.db).refunds("t-cancel-mid")
    assert cancelled.status == "cancelled"
    assert cancelled.result == (
        f"Cancelled (fraud suspected) after issue_refund {refund['refund_id']} was already done "
        "(kept, not undone)."
    )
    run = runner.runs.get("t-cancel-mid")
    assert run.status == "cancelled" and run.owner is None
    assert runner.sweep() == [] and len(Ledger(store.db).refunds("t-cancel-mid")) == 1
    reasons = [e.reason for e in runner.runs.events("t-cancel-mid")]
    assert reasons[-2:] == ["cancel requested", "cancelled"]


def test_recover_cancel_cli(store, clock):
    runner = runner_at(store, clock)
    waiting(runner, "t-cli-cancel")
    out = run_cli("recover.py", "--cancel", "t-cli-cancel", "--reason", "dup").stdout
    assert out == "t-cli-cancel  Cancelled (dup); nothing was done.\n"
    again = run_cli("recover.py", "--cancel", "t-cli-cancel", check_rc=2)
    assert "already cancelled" in again.stderr


# -- audit ----------------------------------------------------------------------------------


def test_the_history_of_an_edited_crashed_retried_finished_run_tells_it_in_order(
    store, monkeypatch
):
    monkeypatch.setenv("LEASE_SECONDS", "1")
    runner = Runner(store)
    outcome = waiting(runner, "t-story")
    edited = {"order_id": "A-1004", "amount": 100.0, "reason": "partial refund"}
    edit = ("inbox", "edit", outcome.interrupt_id, "--args", json.dumps(edited), "--by", "alice")
    assert "queued for a resumer" in run_cli(*edit).stdout
    monkeypatch.setenv("FAULTS", "tool.after-write=kill")  # killed after the refund, no receipt
    run_cli("recover.py", check_rc=-9)
    past(runner.runs.get("t-story").lease_until or 0, "the killed sweep's lease to run out")
    monkeypatch.setenv("FAULTS", "segment.before-done=raise")
    assert "failed" in run_cli("recover.py", check_rc=1).stdout  # a run failed: exit 1
    monkeypatch.delenv("FAULTS")
    assert "Refunded 100.00 EUR" in run_cli("recover.py", "--retry", "t-story").stdout

    lines = run_cli("recover.py", "--history", "t-story").stdout.splitlines()
    steps = [
        "(new) -> running  started",
        "running -> waiting  paused for approval",
        "waiting -> resuming  decision claimed  [inbox@",
        "resuming -> resuming  handed-off decision taken up  [",  # by the sweep
        "resuming -> resuming  lease expired, reclaimed",
        "side effect  [tool:issue_refund]  issue_refund key t-story:",
        "resuming -> failed  failed",
        "failed -> resuming  retry",
        "resuming -> resuming  handed-off decision taken up  [retry@",  # queued, then taken
        "resuming -> done  finished",
    ]
    assert len(lines) == len(steps), lines
    for line, step in zip(lines, steps, strict=True):
        assert step in line, (step, line)
    [refund] = Ledger(store.db).refunds("t-story")
    assert refund["idempotency_key"] in lines[5] and refund["refund_id"] in lines[5]
    assert "edit to issue_refund(order_id='A-1004', amount=100.0" in lines[2]
    assert "by alice" in lines[2] and "proposed issue_refund(" in lines[1]
    assert "Refunded 100.00 EUR" in lines[-1]
    assert run_cli("recover.py", "--history", "t-nobody", check_rc=2).stderr


# -- separation of duties and quorum --------------------------------------------------------


def test_self_approval_is_refused_from_every_source_and_changes_nothing(store, clock, monkeypatch):
    monkeypatch.setenv("SEPARATION_OF_DUTIES", "1")
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-self", requested_by="mallory")
    before = runner.runs.events("t-self")
    with pytest.raises(UserError, match="mallory asked for this request and may not approve it"):
        answer(runner, outcome.interrupt_id, [{"type": "approve"}], "mallory")
    decision = {"decisions": [{"type": "approve"}]}
    reason = claim(runner, "t-self", outcome.interrupt_id, decision, " MALLORY ")
    assert isinstance(reason, Refused) and reason.reason == Refusal.DUTIES
    assert runner.runs.get("t-self").status == "waiting"
    assert runner.runs.events("t-self") == before  # a refusal changes no table
    # the requester may still reject their own request
    answer(runner, outcome.interrupt_id, [{"type": "reject", "message": "oops"}], "mallory")
    [done] = runner.sweep()
    assert done.status == "done" and Ledger(store.db).refunds("t-self") == []


def test_a_two_of_three_quorum_resumes_only_after_the_second_distinct_approval(
    store, clock, monkeypatch
):
    monkeypatch.setenv("REFUND_QUORUM_AMOUNT", "500")
    monkeypatch.setenv("REFUND_QUORUM", "2")
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-quorum")  # A-1004: 540.00 EUR, over the quorum amount
    assert runner.runs.get("t-quorum").quorum == 2
    approve = [{"type": "approve"}]
    first = answer(runner, outcome.interrupt_id, approve, "alice")
    assert first == Pending(["alice"], 2) and runner.sweep() == []
    with pytest.raises(Refused, match="alice already approved"):
        answer(runner, outcome.interrupt_id, approve, "Alice")
    assert runner.sweep() == [] and runner.runs.get("t-quorum").status == "waiting"
    assert runner.inbox.get(outcome.interrupt_id).approvers == ["alice"]

    # another source's approval counts toward the same quorum (one approvals table)
    second = claim(runner, "t-quorum", outcome.interrupt_id, {"decisions": approve}, "bob")
    assert isinstance(second, Applied) and second.approvers == ["alice", "bob"]
    done = runner.resume_claimed(second.run)  # an API claim is resumed by its own process
    assert done.status == "done" and len(Ledger(store.db).refunds("t-quorum")) == 1
    request = runner.inbox.get(outcome.interrupt_id)
    assert request.status == "answered" and request.decided_by == "alice, bob"
    with pytest.raises(Refused, match="already decided"):
        answer(runner, outcome.interrupt_id, approve, "carol")
    reasons = [e.reason for e in runner.runs.events("t-quorum")]
    assert reasons.count("approval recorded") == 2
    assert reasons.index("decision claimed") > reasons.index("approval recorded")


def test_a_single_reject_ends_a_quorum_request(store, clock, monkeypatch):
    monkeypatch.setenv("REFUND_QUORUM_AMOUNT", "500")
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-q-reject")
    answer(runner, outcome.interrupt_id, [{"type": "approve"}], "alice")
    rejected = answer(runner, outcome.interrupt_id, [{"type": "reject", "message": "no"}], "bob")
    assert isinstance(rejected, Applied) and rejected.approvers == ["bob"]
    assert runner.inbox.get(outcome.interrupt_id).decided_by == "bob"
    [done] = runner.sweep()
    assert done.status == "done" and Ledger(store.db).refunds("t-q-reject") == []


# -- escalation ladder ----------------------------------------------------------------------


def test_reminder_then_escalation_each_once_whoever_sweeps(store, clock):
    first, second = runner_at(store, clock), runner_at(store, clock)
    outcome = waiting(first, "t-ladder", expires_in="10h")
    clock.now += 4 * HOUR
    assert first.sweeper.climb_ladder() == []
    clock.now += 1 * HOUR  # 50 %: the reminder
    [reminded] = first.sweeper.climb_ladder() + second.sweeper.climb_ladder()
    assert reminded.note == "reminder" and reminded.status == "waiting"
    assert "expires at" in reminded.result
    assert first.inbox.get(outcome.interrupt_id).ladder == "reminder"
    clock.now += 3 * HOUR  # 80 %: the escalation, once, with two sweepers
    got = []
    barrier = threading.Barrier(2)

    def sweep(r: Runner) -> None:
        barrier.wait()
        got.extend(r.sweeper.climb_ladder())

    threads = [threading.Thread(target=sweep, args=(r,)) for r in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [o.note for o in got] == ["escalated"]
    assert first.sweeper.climb_ladder() == [] and first.runs.get("t-ladder").status == "waiting"
    reasons = [e.reason for e in first.runs.events("t-ladder")]
    assert reasons == ["started", "paused for approval", "reminder", "escalated"]
    listed = run_cli("inbox", "list").stdout
    assert "[ESCALATED]" in listed
    assert "escalated (ladder)" in run_cli("recover.py", "--list").stdout


def test_the_sweep_reads_only_due_ladder_steps_and_rearms_a_moved_point(store, clock, monkeypatch):
    runner = runner_at(store, clock)
    for tid in ("t-due", "t-later"):
        waiting(runner, tid, expires_in="10h" if tid == "t-due" else "100h")
    clock.now += 5 * HOUR  # t-due's reminder point (50 % of 10 h); t-later's is at 50 h
    assert [r.thread_id for r in runner.runs.ladder_candidates()] == ["t-due"]
    # the points move later while it waits: listed by its stored point, nothing is due under
    # the current ones, so it is re-armed for the earliest step left (escalation at 60 %)
    monkeypatch.setenv("APPROVAL_REMIND_AT", "0.9")
    monkeypatch.setenv("APPROVAL_ESCALATE_AT", "0.6")
    assert runner.sweeper.climb_ladder() == [] and runner.runs.ladder_candidates() == []
    clock.now += 1 * HOUR  # 60 %: the escalation, which also covers the skipped reminder
    assert [o.note for o in runner.sweeper.climb_ladder()] == ["escalated"]
    assert runner.runs.ladder_candidates() == [] and runner.sweeper.climb_ladder() == []
    reasons = [e.reason for e in runner.runs.events("t-due")]
    assert reasons == ["started", "paused for approval", "escalated"]
