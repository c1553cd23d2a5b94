"""Nothing lost, nothing twice: processes are killed at each injection point and recovery
finishes every run with its effect exactly once."""

from __future__ import annotations

import threading

import pytest
from conftest import run_cli

from agent.ledger import Ledger
from core.hitl import HitlRequest
from store.receipts import Receipts
from store.runs import RunStore, new_owner
from testkit.clock import runner_at
from testkit.decide import answer
from testkit.wait import past
from worker.runner import Runner

LEASE = "1"


def counts(store, thread_id: str) -> tuple[int, int, int]:
    """(refunds, receipts, inbox requests) for one thread."""
    inbox = store.db.all(
        "SELECT id FROM inbox_requests WHERE external_id = :e",
        {"e": f"approval-worker:{thread_id}"},
    )
    return (
        len(Ledger(store.db).refunds(thread_id)),
        len(Receipts(store.db).for_thread(thread_id)),
        len(inbox),
    )


def after_lease(runs, thread_id: str) -> None:
    """The killed owner's lease must run out first (the next sweep is a new process)."""
    past((runs.get(thread_id).lease_until or 0) + 0.05, f"the killed owner's lease on {thread_id}")


@pytest.fixture
def short_lease(monkeypatch):
    monkeypatch.setenv("LEASE_SECONDS", LEASE)


def answered(runner: Runner, thread_id: str) -> str:
    outcome = runner.start("Refund order A-1004: desk wobbles", thread_id=thread_id)
    assert outcome.status == "waiting", outcome
    answer(runner, outcome.interrupt_id, [{"type": "approve"}], "alice")
    return outcome.interrupt_id


@pytest.mark.parametrize(
    ("point", "refunds_after_kill"),
    [("after-claim", 0), ("tool.after-write", 1), ("segment.before-done", 1)],
)
def test_a_resumer_killed_at_a_point_is_finished_by_recovery(
    runner, short_lease, monkeypatch, point, refunds_after_kill
):
    answered(runner, "t-kill")
    monkeypatch.setenv("FAULTS", f"{point}=kill")
    killed = run_cli("recover.py", check_rc=-9)
    assert killed.stdout == ""
    run = runner.runs.get("t-kill")
    assert run.status == "resuming" and run.owner.startswith("recover@")
    assert counts(runner.store, "t-kill")[0] == refunds_after_kill

    monkeypatch.delenv("FAULTS")
    after_lease(runner.runs, "t-kill")
    out = run_cli("recover.py").stdout
    assert out.startswith("t-kill  Refunded 540.00 EUR"), out
    run = runner.runs.get("t-kill")
    assert run.status == "done" and run.attempts == 3  # start, claim, reclaim
    assert counts(runner.store, "t-kill") == (1, 1, 1)
    events = runner.runs.events("t-kill")
    assert [e.reason for e in events].count("side effect") == 1  # the receipt, once
    reasons = [e.reason for e in events if e.to_status]  # the transitions
    assert reasons == [
        "started",
        "paused for approval",
        "decision claimed",
        "handed-off decision taken up",
        "lease expired, reclaimed",
        "finished",
    ]


def test_a_crash_between_a_nodes_writes_and_its_checkpoint_is_continued(store, clock, monkeypatch):
    """LangGraph then shows ``next == ()`` for an unfinished thread: it must not count as done."""
    monkeypatch.setenv("LEASE_SECONDS", "0.5")
    runner = runner_at(store, clock)
    answered(runner, "t-gap")
    saver = runner.store.checkpointer
    put = saver.put
    calls = []

    def crashing_put(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # the gate's writes are saved; its checkpoint never is
            raise SystemExit("killed between writes and checkpoint")
        return put(*args, **kwargs)

    monkeypatch.setattr(saver, "put", crashing_put)
    with pytest.raises(SystemExit):
        runner.sweep()
    monkeypatch.setattr(saver, "put", put)
    assert runner.runs.get("t-gap").status == "resuming"
    clock.now += 0.6  # the crashed owner's lease runs out
    [outcome] = runner.sweeper.recover_expired()
    assert outcome.status == "done" and outcome.result.startswith("Refunded 540.00 EUR")
    assert counts(runner.store, "t-gap") == (1, 1, 1)


def test_a_start_killed_inside_the_inbox_write_pauses_once_after_recovery(
    store, short_lease, monkeypatch
):
    monkeypatch.setenv("FAULTS", "inbox.write=kill")
    run_cli("run.py", "Refund order A-1001: broken", "--thread-id", "t-inbox", check_rc=-9)
    runs = RunStore(store.db)
    assert runs.get("t-inbox").status == "running"
    assert counts(store, "t-inbox") == (0, 0, 0)  # the request was never committed

    monkeypatch.delenv("FAULTS")
    after_lease(runs, "t-inbox")
    assert run_cli("recover.py").stdout.startswith("t-inbox  paused on interrupt ")
    run = runs.get("t-inbox")
    assert run.status == "waiting"
    assert counts(store, "t-inbox") == (0, 0, 1)
    assert "queued for a resumer" in run_cli("inbox", "approve", run.interrupt_id).stdout
    assert "Refunded 49.90 EUR" in run_cli("recover.py").stdout  # no resumer runs: the sweep
    assert run_cli("recover.py").stdout == ""  # nothing left for a sweep
    assert counts(store, "t-inbox") == (1, 1, 1)


def test_opening_the_same_pause_twice_gives_one_request(runner):
    kwargs = dict(
        external_id="approval-worker:t-x",
        dedupe_key="t-x:abc",
        title="Approve",
        description="d",
        request=HitlRequest(()),
        args_schemas={},
    )
    assert runner.inbox.open(**kwargs) == runner.inbox.open(**kwargs)
    assert len(runner.store.db.all("SELECT id FROM inbox_requests")) == 1


def test_a_live_lease_is_not_reclaimed(runner, monkeypatch):
    monkeypatch.setenv("LEASE_SECONDS", "60")
    assert runner.runs.create("t-alive", "refund", {"text": "x"}, "live-owner")
    assert runner.runs.expired() == []
    assert not runner.runs.reclaim("t-alive", "running", "live-owner", "thief")
    assert runner.sweeper.recover_expired() == []
    assert runner.runs.get("t-alive").owner == "live-owner"


def test_two_sweepers_never_reclaim_the_same_row(store, clock, monkeypatch):
    monkeypatch.setenv("LEASE_SECONDS", "0")  # created with an already expired lease
    runs = RunStore(store.db, clock)
    assert runs.create("t-dead", "refund", {"text": "x"}, "dead-owner")
    clock.now += 0.01
    barrier = threading.Barrier(8)
    wins = []

    def sweeper():
        barrier.wait()
        if runs.reclaim("t-dead", "running", "dead-owner", new_owner("test")):
            wins.append(1)

    threads = [threading.Thread(target=sweeper) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins == [1]


def test_a_failing_tool_marks_the_run_failed_and_retry_finishes_it_once(runner, monkeypatch):
    answered(runner, "t-fail")
    monkeypatch.setenv("FAULTS", "tool.after-write=raise")
    [outcome] = runner.sweep()
    assert outcome.status == "failed"
    run = runner.runs.get("t-fail")
    assert run.status == "failed" and run.attempts == 2
    assert run.error == "InjectedFault: injected fault at tool.after-write"
    assert counts(runner.store, "t-fail") == (1, 0, 1)  # written downstream, no receipt

    monkeypatch.delenv("FAULTS")
    out = run_cli("recover.py", "--retry", "t-fail").stdout
    assert out.startswith("t-fail  Refunded 540.00 EUR"), out
    assert counts(runner.store, "t-fail") == (1, 1, 1)
    assert runner.runs.get("t-fail").attempts == 3
    proc = run_cli("recover.py", "--retry", "t-fail", check_rc=2)
    assert proc.stderr.strip() == "error: run t-fail is done, not failed; only failed runs retry"


def test_retry_failed_is_bounded(runner, monkeypatch):
    answered(runner, "t-stuck")
    monkeypatch.setenv("FAULTS", "resume.start=raise")
    monkeypatch.setenv("RETRY_BASE_SECONDS", "0")
    monkeypatch.setenv("RETRY_MAX_ATTEMPTS", "4")
    runner.sweep()
    assert runner.runs.get("t-stuck").attempts == 2
    for _ in range(5):
        runner.sweeper.retry_failed()
    run = runner.runs.get("t-stuck")
    assert (run.status, run.attempts) == ("failed", 4)
    monkeypatch.delenv("FAULTS")
    assert runner.sweeper.retry_failed() == []  # out of attempts: only --retry takes it now
    assert runner.retry("t-stuck").status == "done"
    assert counts(runner.store, "t-stuck") == (1, 1, 1)


def test_receipts_return_the_first_result(store):
    receipts = Receipts(store.db)
    calls = []

    def act():
        calls.append(1)
        return {"n": len(calls)}

    first = receipts.once("k:1", thread_id="t", tool="x", act=act)
    second = receipts.once("k:1", thread_id="t", tool="x", act=act)
    assert first == second == {"n": 1} and calls == [1]
