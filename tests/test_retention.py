"""Retention: finished runs lose their checkpoints after RETAIN_CHECKPOINTS_FOR and every row
after RETAIN_RUNS_FOR; waiting runs are never touched; the command prunes too."""

from __future__ import annotations

from conftest import run_cli

from agent.ledger import Ledger
from ops.retention import prune, prune_all
from testkit.clock import Clock, runner_at, waiting

DAY = 86400.0


def checkpoint(store, thread_id: str):
    return store.checkpointer.get_tuple({"configurable": {"thread_id": thread_id}})


def count(store, table: str, thread_id: str) -> int:
    sql = f"SELECT count(*) AS n FROM {table} WHERE thread_id = :t"
    return store.db.row(sql, {"t": thread_id})["n"]


def test_checkpoints_then_rows_of_finished_runs_go_and_waiting_runs_stay(store, monkeypatch):
    monkeypatch.setenv("RETAIN_CHECKPOINTS_FOR", "7d")
    monkeypatch.setenv("RETAIN_RUNS_FOR", "30d")
    monkeypatch.setenv("RETRY_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("PRUNE_BATCH", "1")  # several bounded steps
    clock = Clock()
    runner = runner_at(store, clock)
    assert runner.start("Refund order A-1003: the pan cracked", thread_id="t-done").status == "done"
    waiting(runner, "t-cancel")
    runner.cancel("t-cancel", "withdrawn")
    monkeypatch.setenv("FAULTS", "tool.after-write=raise")
    monkeypatch.setenv("REFUND_APPROVAL_THRESHOLD", "1000")  # t-done refunded A-1003 in full
    assert runner.start("Refund order A-1005: broken", thread_id="t-failed").status == "failed"
    monkeypatch.delenv("REFUND_APPROVAL_THRESHOLD")
    monkeypatch.delenv("FAULTS")
    waiting(runner, "t-wait", expires_in="1000d")
    finished = ["t-done", "t-cancel", "t-failed"]
    assert all(checkpoint(store, t) is not None for t in [*finished, "t-wait"])

    clock.now += 6 * DAY
    assert not prune(store, clock)  # nothing is old enough yet
    clock.now += 2 * DAY
    first = prune(store, clock)
    assert first.checkpoints == 1  # PRUNE_BATCH=1: a bounded step
    assert prune_all(store, clock).checkpoints == 2
    assert all(checkpoint(store, t) is None for t in finished)
    assert checkpoint(store, "t-wait") is not None
    assert runner.runs.get("t-done").status == "done"  # the audit record stays
    assert count(store, "run_events", "t-done") > 0 and Ledger(store.db).refunds("t-done")

    clock.now += 30 * DAY
    assert prune_all(store, clock).runs == 3
    for t in finished:
        assert runner.runs.get(t) is None
        for table in ("run_events", "receipts", "refunds"):
            assert count(store, table, t) == 0, (table, t)
    inbox_rows = store.db.all("SELECT external_id FROM inbox_requests")
    assert [r["external_id"].split(":")[-1] for r in inbox_rows] == ["t-wait"]
    assert runner.runs.get("t-wait").status == "waiting" and checkpoint(store, "t-wait")


def test_the_sweep_and_the_command_prune(store, monkeypatch):
    monkeypatch.setenv("RETAIN_CHECKPOINTS_FOR", "1s")
    clock = Clock()
    runner = runner_at(store, clock)
    assert runner.start("Refund order A-1003: the pan cracked", thread_id="t-s").status == "done"
    clock.now += 2
    runner.recovery_pass()
    assert checkpoint(store, "t-s") is None
    out = run_cli("recover.py", "--prune").stdout
    assert out.startswith("pruned checkpoints of 0 runs, 0 runs")
