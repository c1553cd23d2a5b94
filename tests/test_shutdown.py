"""Restarts stall nothing (SIGTERM to real processes on Postgres): a sweeper finishes its
current run when it can, and otherwise hands it back (lease released) so another process takes
it at once instead of after ``LEASE_SECONDS``; the app ends a long-poll at once, and its
resumer process hands back a resume that outlives ``SHUTDOWN_SECONDS``. Each run ends done
exactly once, with one refund."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from agent.ledger import Ledger
from store.states import Event
from testkit import loopback, zygote
from testkit.databases import ROOT, settings_to_clear
from testkit.decide import answer
from testkit.sockets import get, read_by_server, status_of
from testkit.wait import until
from testkit.webapp import LOCAL_SECRET, api_key, free_port
from worker.runner import Runner

POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)
COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")


def env(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k not in settings_to_clear()}
    db = {k: os.environ[k] for k in ("DATABASE_URL", "SQLITE_PATH") if k in os.environ}
    return {**keep, **db, "WEBHOOK_SECRET": LOCAL_SECRET, **extra}


def decided(runner: Runner, thread_id: str) -> str:
    """A run paused on its approval, approved in the local inbox (for a sweep to resume)."""
    Ledger(runner.store.db).clear()
    paused = runner.start("Refund order A-1001: arrived broken", thread_id=thread_id)
    assert paused.status == "waiting", paused
    answer(runner, paused.interrupt_id, [{"type": "approve"}], "alice")
    return paused.interrupt_id


def once(runner: Runner, thread_id: str) -> list[str]:
    """Done, with one finished transition and one refund; the trail's reasons."""
    assert runner.runs.get(thread_id).status == "done"
    reasons = [e.reason for e in runner.runs.events(thread_id)]
    assert reasons.count("finished") == 1, reasons
    assert len(Ledger(runner.store.db).refunds(thread_id)) == 1
    return reasons


def resuming(runner: Runner, thread_id: str, proc: subprocess.Popen, owner: str) -> bool:
    """The run is resuming under an owner of ``owner``'s kind (the sweeper took it up)."""
    assert proc.poll() is None, "the process exited before its resume began"
    row = runner.runs.get(thread_id)
    return row.status == "resuming" and (row.owner or "").startswith(owner)


@POSTGRES
def test_a_stopped_sweeper_finishes_the_run_it_is_resuming(runner: Runner, tmp_path: Path):
    decided(runner, "t-stop-finish")
    extra = {"FAULTS": "resume.start=sleep:1", "SHUTDOWN_SECONDS": "60"}
    log = open(tmp_path / "sweeper.log", "w")  # noqa: SIM115 - closed below
    sweeper = zygote.popen(
        [COMMAND, "recover", "--forever", "--interval", "0.2"],
        cwd=tmp_path,
        env=env(**extra),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        until(lambda: resuming(runner, "t-stop-finish", sweeper, "recover@"), "the claim", 90)
        sweeper.send_signal(signal.SIGTERM)
        assert sweeper.wait(timeout=120) == 0
    finally:
        _end(sweeper)
        log.close()
    once(runner, "t-stop-finish")


@POSTGRES
def test_a_stopped_sweeper_hands_its_run_back_for_another_to_take_at_once(
    runner: Runner, tmp_path: Path
):
    decided(runner, "t-stop-hand")
    extra = {"FAULTS": "resume.start=sleep:600", "SHUTDOWN_SECONDS": "1"}
    log = open(tmp_path / "sweeper.log", "w")  # noqa: SIM115 - closed below
    sweeper = zygote.popen(
        [COMMAND, "recover", "--forever", "--interval", "0.2"],
        cwd=tmp_path,
        env=env(**extra),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        until(lambda: resuming(runner, "t-stop-hand", sweeper, "recover@"), "the claim", 90)
        sweeper.send_signal(signal.SIGTERM)
        assert sweeper.wait(timeout=60) == 0  # after SHUTDOWN_SECONDS, not the 600 s resume
    finally:
        _end(sweeper)
        log.close()
    row = runner.runs.get("t-stop-hand")
    assert row.status == "resuming" and row.owner.startswith("handoff:recover@")
    assert row.lease_until < time.time()  # released: no LEASE_SECONDS (300) to wait out
    assert "handed back" in (tmp_path / "sweeper.log").read_text()
    runner.recovery_pass()  # the next process's first sweep takes it
    assert Event.TAKEN_UP in once(runner, "t-stop-hand")  # as a hand-off: no attempt counted


@POSTGRES
def test_a_stopped_app_ends_its_long_poll_and_its_resumer_hands_back(
    runner: Runner, tmp_path: Path
):
    Ledger(runner.store.db).clear()
    paused = runner.start("Refund order A-1001: arrived broken", thread_id="t-stop-app")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    extra = {"FAULTS": "resume.start=sleep:600", "SHUTDOWN_SECONDS": "2"}
    log = open(tmp_path / "app.log", "w")  # noqa: SIM115 - closed below
    app = zygote.popen(
        [COMMAND, "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env(**extra),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        until(lambda: "resumer process" in (tmp_path / "app.log").read_text(), "the resumer", 90)
        until(lambda: _healthy(url, app), "the app", 90)
        db_env = {"DATABASE_URL": os.environ["DATABASE_URL"]}
        bob = api_key(db_env, "bob", "reviewer")
        resume = {"decisions": [{"type": "approve"}], "digest": paused_digest(runner)}
        body = {"command": {"resume": {paused.interrupt_id: resume}}}
        created = loopback.post(f"{url}/lg/threads/t-stop-app/runs", json=body, headers=bob)
        assert created.status_code == 200, created.text
        until(lambda: resuming(runner, "t-stop-app", app, ""), "the claim", 30)

        ops = api_key(db_env, "ops", "operator")
        join = get(port, f"/lg/threads/t-stop-app/runs/{created.json()['run_id']}/join", ops)
        until(lambda: read_by_server(port, join), "the app holds the long-poll", 30)
        app.send_signal(signal.SIGTERM)
        assert status_of(join) == 200  # answered at once, not cut when the grace ran out
        assert app.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        _end(app)
        log.close()
    row = runner.runs.get("t-stop-app")
    assert row.status == "resuming" and row.lease_until < time.time(), row  # handed back
    runner.recovery_pass()
    once(runner, "t-stop-app")


def paused_digest(runner: Runner) -> str:
    run = runner.runs.get("t-stop-app")
    assert run is not None and run.request_digest
    return run.request_digest


def _end(proc: subprocess.Popen) -> None:
    """Whatever the test's outcome, no process of it outlives it."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def _healthy(url: str, proc: subprocess.Popen) -> bool:
    assert proc.poll() is None, "the app exited"
    try:
        return loopback.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
