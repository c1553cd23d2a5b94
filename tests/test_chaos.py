"""Chaos on Postgres: duplicate webhooks, racing sweepers, processes killed at random, and a
Postgres restart mid-resume. At the end every run is done and each refund exists exactly once."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import ROOT

from agent.ledger import Ledger
from store.receipts import Receipts
from testkit import loopback, zygote
from testkit.decide import answer
from testkit.proxy import TcpProxy
from testkit.webapp import answered_event, approve_item, sign, start_server, worker_env
from worker.runner import Runner

RUNS = 100
DEADLINE = 180.0  # seconds; the test fails rather than hang


TAKEN_UP = "SELECT count(*) AS n FROM run_events WHERE reason = 'handed-off decision taken up'"
OUTAGE_SEEN = re.compile(r"interrupted by a database error|sweep failed|Connection refused")


def db_env() -> dict[str, str]:
    return {"DATABASE_URL": os.environ["DATABASE_URL"]}


def answered_runs(runner: Runner, n: int, prefix: str) -> list[tuple[str, str]]:
    pairs = []
    for i in range(n):
        thread_id = f"{prefix}-{i:03d}"
        order = ("A-1001", "A-1002", "A-1004", "A-1005")[i % 4]  # all above the threshold
        outcome = runner.start(f"Refund order {order}: damaged", thread_id=thread_id)
        assert outcome.status == "waiting"
        # a partial refund, so a hundred runs fit the four orders' totals (the ledger refuses
        # a refund past what is still refundable)
        args = {"order_id": order, "amount": 1.0, "reason": "partial"}
        edit = {"type": "edit", "edited_action": {"name": "issue_refund", "args": args}}
        answer(runner, outcome.interrupt_id, [edit], "alice")
        pairs.append((thread_id, outcome.interrupt_id))
    return pairs


def sweeper(env: dict[str, str], log=subprocess.DEVNULL) -> subprocess.Popen:
    return zygote.popen(
        [sys.executable, str(ROOT / "recover.py"), "--wait", "--interval", "0.2"],
        env=env,
        stdout=log,
        stderr=log,
    )


def assert_all_done_once(store, pairs) -> None:
    rows = store.db.all("SELECT thread_id, status FROM runs")
    assert {r["status"] for r in rows} == {"done"}, [r for r in rows if r["status"] != "done"]
    refunds = Ledger(store.db).refunds()
    missing = sorted({t for t, _ in pairs} - {r["thread_id"] for r in refunds})
    stories = {
        t: (
            store.db.one("SELECT result FROM runs WHERE thread_id = :t", {"t": t}),
            [
                (e["actor"], e["reason"], e["detail"])
                for e in store.db.all(
                    "SELECT * FROM run_events WHERE thread_id = :t ORDER BY id", {"t": t}
                )
            ],
        )
        for t in missing
    }
    assert not missing, stories
    assert len(refunds) == len(pairs)
    assert sorted(r["thread_id"] for r in refunds) == sorted(t for t, _ in pairs)
    receipts = store.db.all("SELECT idempotency_key FROM receipts")
    assert len(receipts) == len(pairs)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_chaos_every_run_done_and_every_refund_once(runner, tmp_path):
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    started = time.monotonic()
    pairs = answered_runs(runner, RUNS, "t-chaos")
    env = worker_env(db_env(), LEASE_SECONDS="2")
    server = start_server(env, tmp_path / "uvicorn.log")
    port = int(server.url.rsplit(":", 1)[1])
    sweepers = [sweeper(env), sweeper(env)]
    stop = threading.Event()
    figures = {
        "sweeper_kills": 0,
        "server_kills": 0,
        "accepted": 0,
        "ignored": 0,
        "refused_connections": 0,
    }
    lock = threading.Lock()

    def deliver(pair: tuple[str, str]) -> None:
        thread_id, interrupt_id = pair
        body = answered_event(interrupt_id, thread_id, [approve_item()])
        while not stop.is_set():  # like Svix: retry until a 2xx
            try:
                code = loopback.post(
                    f"{server.url}/webhooks/vigilator",
                    content=body,
                    headers=sign(body, msg_id=f"msg-{thread_id}"),
                    timeout=15,
                ).status_code
            except httpx.TransportError:
                with lock:
                    figures["refused_connections"] += 1
                time.sleep(0.2)  # the app is restarting: retry the delivery (deadline above)
                continue
            with lock:
                figures["accepted" if code == 202 else "ignored"] += 1
            return

    def killer() -> None:
        nonlocal server
        for round_ in range(8):
            if stop.wait(rng.uniform(0.3, 1.2)):
                return
            if round_ == 3:
                server.proc.kill()
                server.proc.wait()
                figures["server_kills"] += 1
                server = start_server(env, tmp_path / "uvicorn2.log", port=port)
                continue
            i = rng.randrange(len(sweepers))
            sweepers[i].kill()
            sweepers[i].wait()
            figures["sweeper_kills"] += 1
            sweepers[i] = sweeper(env)

    kill_thread = threading.Thread(target=killer)
    kill_thread.start()
    deliveries = pairs * 2  # every event delivered twice, in random order
    rng.shuffle(deliveries)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(deliver, deliveries))
        kill_thread.join()
        for proc in sweepers:  # the survivors sweep until nothing is unfinished
            proc.wait(timeout=max(1.0, DEADLINE - (time.monotonic() - started)))
    finally:
        stop.set()
        kill_thread.join()
        for proc in sweepers:
            if proc.poll() is None:
                proc.kill()
        server.stop()
    elapsed = time.monotonic() - started
    reclaims = runner.store.db.one(
        "SELECT count(*) AS n FROM run_events WHERE reason = 'lease expired, reclaimed'"
    )["n"]
    print(f"\nchaos seed={seed} runs={RUNS} elapsed={elapsed:.1f}s reclaims={reclaims} {figures}")
    assert_all_done_once(runner.store, pairs)
    assert figures["sweeper_kills"] + figures["server_kills"] > 0


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_database_outage_while_runs_resume(runner, tmp_path):
    """The sweeper's database goes away while it resumes (every connection cut, the port
    closed, as a restart looks from the client) and comes back: every run is done once. The
    outage is a loopback proxy in front of the shared Postgres: restarting the cluster itself
    cut every other test's database too, which the parallel suite saw as their failures."""
    pairs = answered_runs(runner, 30, "t-restart")
    url = os.environ["DATABASE_URL"]
    port = urlsplit(url).port or 5432
    proxy = TcpProxy(port).start()
    through = url.replace(f":{port}", f":{proxy.port}", 1)
    env = worker_env({"DATABASE_URL": through}, LEASE_SECONDS="2", FAULTS="resume.start=sleep:0.05")
    log_path = tmp_path / "sweeper.log"
    proc = sweeper(env, open(log_path, "w"))  # noqa: SIM115 - closed with the process
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:  # cut once resumes are on
            if runner.store.db.one(TAKEN_UP)["n"] >= 3:
                break
            time.sleep(0.05)  # polls until three resumes were taken up (deadline above)
        proxy.stop()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if OUTAGE_SEEN.search(log_path.read_text()):
                break
            time.sleep(0.05)  # polls until the sweeper has met the outage (deadline above)
        proxy.start()
        proc.wait(timeout=DEADLINE)
    finally:
        proxy.stop()
        if proc.poll() is None:
            proc.kill()
    assert OUTAGE_SEEN.search(log_path.read_text()), log_path.read_text()[-3000:]
    assert proc.returncode == 0, log_path.read_text()[-3000:]
    assert_all_done_once(runner.store, pairs)
    assert len(Receipts(runner.store.db).for_thread(pairs[0][0])) == 1
