"""``approval-worker halt --tool issue_refund`` during a 50-run load on Postgres with two app
workers and resumes in flight (issue 35): once the halt returns no new refund row appears, every
pending decision is refused "halted" with nothing written, and after ``unhalt`` every run
finishes with exactly one refund. Real processes: uvicorn with two workers, the command line,
the recovery sweep."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from store.db import open_store
from testkit import zygote
from testkit.databases import (
    ROOT,
    TEST_RATE_LIMITS,
    api_key,
    fresh_database,
    settings_to_clear,
    worker_env,
)
from testkit.servers import LOCAL_SECRET, start_server
from testkit.wait import until

pytestmark = pytest.mark.slow

RUNS, FIRST_WAVE = 50, 30
COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")


@pytest.fixture
def db_env(postgres_url, tmp_path, monkeypatch):
    for name in settings_to_clear():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    with fresh_database("postgres", tmp_path, postgres_url) as env:
        for name, value in {**TEST_RATE_LIMITS, **env}.items():
            monkeypatch.setenv(name, value)
        with open_store():  # the schema, before two workers start at once
            pass
        yield env


def command(env: dict, *args: str) -> str:
    done = zygote.run(
        [COMMAND, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def test_halt_during_a_50_run_load_with_two_workers(db_env, tmp_path):
    env = worker_env(db_env, WEBHOOK_SECRET=LOCAL_SECRET)
    server = start_server(env, tmp_path / "server.log", workers=2)
    rita, bob = api_key(db_env, "rita", "requester"), api_key(db_env, "bob", "reviewer")
    http = httpx.Client(timeout=120)
    store_cm = open_store()
    store = store_cm.__enter__()
    db = store.db

    def refunds() -> int:
        return db.row("SELECT COUNT(*) AS n FROM refunds")["n"]

    try:
        approvals = {}
        for i in range(RUNS):
            started = http.post(
                f"{server.url}/runs",
                json={"input": "Refund order A-1004: desk wobbles", "thread_id": f"load{i:02d}"},
                headers=rita,
            )
            assert started.status_code == 201, started.text
            approvals[started.json()["thread_id"]] = started.json()["approval"]
        runs = sorted(approvals)

        def decide(thread_id: str) -> httpx.Response:
            approval = approvals[thread_id]
            args = {"order_id": "A-1004", "amount": 5.0, "reason": "desk wobbles"}
            body = {
                "interrupt_id": approval["interrupt_id"],
                "digest": approval["digest"],
                "decisions": [
                    {"type": "edit", "edited_action": {"name": "issue_refund", "args": args}}
                ],
            }
            return http.post(f"{server.url}/runs/{thread_id}/decision", json=body, headers=bob)

        with ThreadPoolExecutor(max_workers=6) as pool:
            wave = [pool.submit(decide, t) for t in runs[:FIRST_WAVE]]
            until(lambda: refunds() >= 3, "the first refunds of the wave")  # resumes in flight
            command(env, "halt", "--tool", "issue_refund", "--reason", "load test", "--by", "olga")
            at_halt = refunds()
            answers = [f.result() for f in wave]
        assert {a.status_code for a in answers} <= {202, 423}

        def settled() -> bool:  # no run left mid-resume but those the halt parked
            rows = db.all("SELECT status, owner FROM runs WHERE status IN ('running', 'resuming')")
            return all((r["owner"] or "").startswith("halted:") for r in rows)

        until(settled, "every resume done or parked by the halt", timeout=180)
        assert refunds() == at_halt, "a refund row appeared after the halt returned"
        parked = db.all("SELECT thread_id FROM runs WHERE owner = 'halted:tool:issue_refund'")
        pending = [
            r["thread_id"] for r in db.all("SELECT thread_id FROM runs WHERE status = 'waiting'")
        ]
        assert pending, "the load left no pending decision to refuse"
        before = [
            db.all("SELECT * FROM runs ORDER BY thread_id"),
            db.row("SELECT COUNT(*) AS n FROM run_events")["n"],
            refunds(),
        ]
        for thread_id in pending:
            refused = decide(thread_id)
            assert refused.status_code == 423, refused.text
            assert refused.json()["error"]["code"] == "halted"
        after = [
            db.all("SELECT * FROM runs ORDER BY thread_id"),
            db.row("SELECT COUNT(*) AS n FROM run_events")["n"],
            refunds(),
        ]
        assert after == before

        out = command(env, "unhalt", "--tool", "issue_refund", "--reason", "done", "--by", "olga")
        assert out.startswith(f"unhalted; {len(parked)} stopped run(s)")
        for thread_id in pending:
            assert decide(thread_id).status_code == 202
        sweep = zygote.run(
            [sys.executable, str(ROOT / "recover.py")],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
            cwd=tmp_path,
        )
        assert sweep.returncode == 0, (sweep.stdout, sweep.stderr)

        def all_done() -> bool:
            return db.row("SELECT COUNT(*) AS n FROM runs WHERE status = 'done'")["n"] == RUNS

        until(all_done, "every run done after unhalt", timeout=180)
        per_run = db.all("SELECT thread_id, COUNT(*) AS n FROM refunds GROUP BY thread_id")
        assert sorted(r["thread_id"] for r in per_run) == runs
        assert {r["n"] for r in per_run} == {1}  # exactly once each
        receipts = db.all(
            "SELECT thread_id, COUNT(*) AS n FROM receipts WHERE tool = 'issue_refund' "
            "GROUP BY thread_id"
        )
        assert {r["n"] for r in receipts} == {1} and len(receipts) == RUNS
        assert os.environ.get("DATABASE_URL")  # Postgres, as the issue asks
    finally:
        store_cm.__exit__(None, None, None)
        http.close()
        server.stop()
