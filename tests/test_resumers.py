"""Resumer processes (``RESUME_PROCESSES``, 1 by default on Postgres): under a real uvicorn on
127.0.0.1, fed real signed deliveries, the resumes run in a child process of the app's, each run
is done exactly once, a child killed mid-flight has its run queued again at once (and a new
child serves it and the rest of the queue, which is the database's), and stopping the app
finishes what its child took and leaves the rest queued for the next process."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from agent.ledger import Ledger
from store.claimed import queued
from store.db import open_store
from testkit import loopback, zygote
from testkit.databases import ROOT, fresh_database, pointed_at
from testkit.wait import until
from testkit.webapp import (
    Server,
    answered_event,
    approve_item,
    sign,
    start_server,
    wait_for_status,
    worker_env,
)
from worker.runner import Runner

CHILDREN = {
    "RESUME_PROCESSES": "1"
}  # the product's default on Postgres, what these tests are about

READY = re.compile(r"resumer process (\d+) ready")
METRICS_TOKEN = "mtok-4711-never-logged"


@pytest.fixture
def db_env(postgres_url, tmp_path):
    with fresh_database("postgres", tmp_path, postgres_url) as env:
        with pointed_at(env), open_store():
            pass  # the schema, before any server
        yield env


def waiting(db_env: dict[str, str], prefix: str, count: int) -> list[tuple[str, str]]:
    """``count`` runs paused on their approval: (thread id, interrupt id)."""
    out = []
    with pointed_at(db_env), open_store() as store:
        runner = Runner(store)
        for i in range(count):
            outcome = runner.start("Refund order A-1001: arrived broken", thread_id=f"{prefix}{i}")
            assert outcome.status == "waiting"
            out.append((outcome.thread_id, outcome.interrupt_id))
    return out


def deliver(server: Server, thread_id: str, interrupt_id: str) -> httpx.Response:
    # every run here refunds A-1001: each approves a cent of it, so none is refused at the
    # decision as more than the order has left (approving is judged like an edit)
    cent = {"order_id": "A-1001", "amount": 0.01, "reason": "arrived broken"}
    body = answered_event(interrupt_id, thread_id, [{**approve_item(), "decision": "edit",
                                                     "editedArgs": cent}])  # fmt: skip
    headers = sign(body, msg_id=f"msg-{thread_id}")
    return loopback.post(
        f"{server.url}/webhooks/vigilator", content=body, headers=headers, timeout=30
    )


def children(server: Server, timeout: float = 60, besides: tuple[int, ...] = ()) -> int:
    """The pid of the app's ready resumer process (one not in ``besides``), read off its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(p) for p in READY.findall(Path(server.log).read_text())]
        fresh = [p for p in pids if p not in besides]
        if fresh:
            return fresh[-1]
        time.sleep(0.1)  # polls the log until the resumer says ready (deadline above)
    raise AssertionError(f"no resumer process got ready: {Path(server.log).read_text()[-2000:]}")


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def once_each(db_env: dict[str, str], thread_ids: list[str]) -> None:
    """Every run is done, with one finished transition and at most one refund."""
    with pointed_at(db_env), open_store() as store:
        runner = Runner(store)
        ledger = Ledger(store.db)
        for tid in thread_ids:
            assert runner.runs.get(tid).status == "done", tid
            finished = [e for e in runner.runs.events(tid) if e.reason == "finished"]
            assert len(finished) == 1, (tid, finished)
            assert len(ledger.refunds(tid)) <= 1, tid


def test_resumes_run_in_a_child_of_the_app_each_once(db_env, tmp_path):
    runs = waiting(db_env, "t-child-", 20)
    env = worker_env(db_env, METRICS_TOKEN=METRICS_TOKEN, **CHILDREN)
    server = start_server(env, tmp_path / "uvicorn.log")
    try:
        child = children(server)
        assert child != server.proc.pid and parent_of(child) == server.proc.pid
        before = cpu_ticks(child)
        for tid, iid in runs:  # about 10/s
            assert deliver(server, tid, iid).status_code == 202
            time.sleep(0.1)  # paces the deliveries at about 10/s (a load shape, not a wait)
        for tid, _ in runs:
            wait_for_status(server.url, tid, "done")
        assert cpu_ticks(child) > before  # the graph segments ran there
        metrics = loopback.get(
            f"{server.url}/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"}
        ).text
        # the child's counters reach the app's /metrics (no PROMETHEUS_MULTIPROC_DIR here)
        assert 'approval_transitions_total{kind="finished"} 20.0' in metrics
        assert "approval_decision_to_resumed_seconds_count 20.0" in metrics
    finally:
        server.stop()
    once_each(db_env, [t for t, _ in runs])
    log = Path(server.log).read_text()
    assert "Traceback" not in log and "left to the lease" not in log


def test_a_killed_childs_run_is_queued_again_at_once_and_a_new_one_serves(db_env, tmp_path):
    """The child is SIGKILLed while resuming a (b still queued in the database: its one thread
    is busy). The app queues a again as soon as it sees the child gone, so the new child
    resumes both, although the lease is an hour: no sweep, no lease waited for."""
    (a, a_iid), (b, b_iid) = waiting(db_env, "t-kill-", 2)
    env = worker_env(
        db_env,
        FAULTS="resume.start=sleep:1.5",
        RESUME_THREADS="1",
        LEASE_SECONDS="3600",
        **CHILDREN,
    )
    server = start_server(env, tmp_path / "uvicorn.log")
    try:
        first = children(server)
        assert deliver(server, a, a_iid).status_code == 202
        until(lambda: "fault resume.start: pausing" in Path(server.log).read_text(),
              "a's resume to begin in the child")  # fmt: skip
        assert deliver(server, b, b_iid).status_code == 202  # queued: the one thread is busy
        os.kill(first, signal.SIGKILL)  # mid-flight: a is in its resume
        second = children(server, besides=(first,))
        assert parent_of(second) == server.proc.pid
        wait_for_status(server.url, a, "done")  # queued again at once, not left to the lease
        wait_for_status(server.url, b, "done")  # the queue is the database's: nothing lost
        assert loopback.get(f"{server.url}/healthz").status_code == 200
    finally:
        server.stop()
    once_each(db_env, [a, b])
    log = Path(server.log).read_text()
    assert f"resumer process {first} exited" in log and f"resuming {a}: queued again" in log


def test_stopping_the_app_finishes_what_it_took_and_leaves_the_rest_queued(db_env, tmp_path):
    """SIGTERM with one resume running and three decisions queued: the child finishes its run
    and takes no other; the three stay queued in the database, and the next process (a
    one-shot sweep here) takes them at once, with an hour's lease that nobody waits for."""
    runs = waiting(db_env, "t-stop-", 4)
    env = worker_env(
        db_env,
        FAULTS="resume.start=sleep:0.5",
        RESUME_THREADS="1",
        LEASE_SECONDS="3600",
        **CHILDREN,
    )
    server = start_server(env, tmp_path / "uvicorn.log")
    try:
        children(server)
        for tid, iid in runs:
            assert deliver(server, tid, iid).status_code == 202
    finally:
        server.stop()
    assert server.proc.returncode is not None
    assert "left to the lease" not in Path(server.log).read_text()
    with pointed_at(db_env), open_store() as store:
        rows = [Runner(store).runs.get(t) for t, _ in runs]
        assert all(r.status == "done" or queued(r) for r in rows), rows  # none leased
    sweep = zygote.run(
        [sys.executable, str(ROOT / "recover.py")],
        env=worker_env(db_env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sweep.returncode == 0, sweep.stderr
    once_each(db_env, [t for t, _ in runs])
