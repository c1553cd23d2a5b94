"""The operator's view of the app under uvicorn: /metrics (token, two workers reporting the same
totals), JSON log lines per request and per transition with request ids, no secret in any log
line, /healthz without the database and /readyz + 503 during a database outage."""

from __future__ import annotations

import base64
import json
import os
import re
import time

import httpx
import pytest

from testkit import loopback
from testkit.databases import fresh_database
from testkit.proxy import TcpProxy
from testkit.webapp import SECRET, api_key, sign, start_server, wait_for_status, worker_env

METRICS_TOKEN = "mtok-known-secret-4711"
NOTIFY_SECRET = "whsec_" + base64.b64encode(b"notify-secret-never-in-the-logs!").decode()
SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} ([0-9.e+-]+)$", re.M)


def samples(text: str, name: str) -> dict[str, float]:
    return {labels: float(v) for n, labels, v in SAMPLE.findall(text) if n == name}


def scrape(url: str) -> str:
    with httpx.Client() as client:  # a new connection each time: any worker may answer
        reply = client.get(f"{url}/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"})
    assert reply.status_code == 200, reply.text
    return reply.text


@pytest.fixture
def db_env(store):
    """The test database, set up before the workers start (two workers setting up one fresh
    SQLite file at once race on its migrations)."""
    return {k: os.environ[k] for k in ("DATABASE_URL", "SQLITE_PATH") if k in os.environ}


def test_metrics_logs_and_request_ids_with_two_workers(db_env, tmp_path):
    prom = tmp_path / "prom"
    prom.mkdir()
    env = worker_env(
        db_env,
        LOG_FORMAT="json",
        METRICS_TOKEN=METRICS_TOKEN,
        PROMETHEUS_MULTIPROC_DIR=str(prom),
        NOTIFY_SECRET=NOTIFY_SECRET,
    )
    server = start_server(env, tmp_path / "server.log", workers=2)
    rita, bob = api_key(db_env, "rita", "requester"), api_key(db_env, "bob", "reviewer")
    try:
        url = server.url
        unauthorised = loopback.get(f"{url}/metrics", headers={"authorization": "Bearer wrong"})
        assert unauthorised.status_code == 401
        assert unauthorised.json()["error"]["code"] == "unauthorized"
        started = loopback.post(
            f"{url}/runs",
            json={"input": "Refund order A-1004: desk wobbles", "thread_id": "t-m1"},
            headers={"x-request-id": "req-start-1", **rita},
            timeout=60,
        )
        assert started.status_code == 201 and started.headers["x-request-id"] == "req-start-1"
        approval, m1 = started.json()["approval"], started.json()["thread_id"]
        decided = loopback.post(
            f"{url}/runs/{m1}/decision",
            json={
                "interrupt_id": approval["interrupt_id"],
                "digest": approval["digest"],
                "decisions": [{"type": "approve"}],
            },
            headers=bob,
            timeout=60,
        )
        assert decided.status_code == 202 and re.fullmatch(
            r"[0-9a-f]{32}", decided.headers["x-request-id"]
        )
        wait_for_status(url, m1, "done")
        done = loopback.post(
            f"{url}/runs",
            json={"input": "Refund order A-1003: the pan cracked", "thread_id": "t-m2"},
            headers=rita,
            timeout=60,
        )
        assert done.json()["status"] == "done"
        forged = loopback.post(
            f"{url}/webhooks/local", content="{}", headers=sign("{}", secret=NOTIFY_SECRET)
        )
        assert forged.status_code in (400, 401)

        texts = [scrape(url) for _ in range(8)]
        transitions = [samples(t, "approval_transitions_total") for t in texts]
        assert all(t == transitions[0] for t in transitions)  # every worker reports the totals
        want = {
            "started": 2,
            "paused for approval": 1,
            "decision claimed": 1,
            "handed-off decision taken up": 1,  # by the resumer, from the queue
            "finished": 2,
        }
        assert transitions[0] == {f'kind="{k}"': float(v) for k, v in want.items()}
        claims = samples(texts[0], "approval_claims_total")
        assert claims == {'outcome="won",reason=""': 1.0}
        assert samples(texts[0], "approval_runs")['status="done"'] == 2.0
        assert "approval_segment_seconds_count 3.0" in texts[0]
        assert "approval_decision_to_resumed_seconds_count 1.0" in texts[0]
        assert "approval_outbox_backlog 0.0" in texts[0]
    finally:
        server.stop()

    log_text = (tmp_path / "server.log").read_text()
    keys = [h["authorization"].split()[1] for h in (rita, bob)]
    for secret in (SECRET, METRICS_TOKEN, NOTIFY_SECRET, *keys):
        assert secret not in log_text
    lines = [json.loads(x) for x in log_text.splitlines() if x.startswith("{")]
    assert all({"time", "level", "message", "logger"} <= set(x) for x in lines)
    access = [x for x in lines if x["logger"] == "ops.access"]
    [start_line] = [x for x in access if x.get("request_id") == "req-start-1"]
    assert start_line["path"] == "/runs" and start_line["status"] == 201
    assert start_line["method"] == "POST" and "duration_ms" in start_line
    assert len({x["request_id"] for x in access}) == len(access)  # one id per request
    assert any(x["path"] == "/webhooks/local" and x["status"] in (400, 401) for x in access)
    [decide_line] = [x for x in access if x["path"] == f"/runs/{m1}/decision"]
    assert decide_line["thread_id"] == m1 and decide_line["status"] == 202
    moves = [
        x["event"] for x in lines if x["logger"] == "ops.transitions" and x.get("thread_id") == m1
    ]
    # the take-up is logged by the resumer (a child process on Postgres), the claim by the app
    # after its commit: two processes, so those two lines may come in either order
    taken = "handed-off decision taken up"
    assert moves[:2] == ["started", "paused for approval"] and moves[-1] == "finished", moves
    assert sorted(moves[2:-1]) == ["decision claimed", taken], moves
    start_moves = [
        x
        for x in lines
        if x["logger"] == "ops.transitions" and x.get("request_id") == "req-start-1"
    ]
    assert [x["event"] for x in start_moves] == ["started", "paused for approval"]
    assert "Traceback" not in log_text


def test_readyz_and_api_answer_503_while_postgres_is_down(postgres_url, tmp_path):
    from urllib.parse import urlsplit

    target = urlsplit(postgres_url)
    proxy = TcpProxy(target.port or 5432).start()
    with fresh_database("postgres", tmp_path, postgres_url) as db_env:
        db_url = db_env["DATABASE_URL"].replace(f":{target.port}", f":{proxy.port}", 1)
        env = worker_env({"DATABASE_URL": db_url}, DATABASE_POOL_TIMEOUT="1", LOG_FORMAT="json")
        server = start_server(env, tmp_path / "server.log")
        ops = api_key(db_env, "olga", "operator")
        try:
            assert loopback.get(f"{server.url}/readyz").json() == {
                "status": "ready",
                "database": "postgres",
            }
            assert loopback.get(f"{server.url}/runs/nope", headers=ops).status_code == 404
            proxy.stop()
            ready = loopback.get(f"{server.url}/readyz", timeout=10)
            assert ready.status_code == 503 and ready.json()["status"] == "unavailable"
            api = loopback.get(f"{server.url}/runs/nope", headers=ops, timeout=10)
            assert api.status_code == 503
            assert api.json()["error"]["code"] == "unavailable"
            assert loopback.get(f"{server.url}/healthz").status_code == 200  # alive all along
            assert loopback.get(f"{server.url}/metrics").status_code == 404  # no METRICS_TOKEN
            proxy.start()
            for _ in range(50):
                if loopback.get(f"{server.url}/readyz", timeout=10).status_code == 200:
                    break
            else:
                pytest.fail("/readyz never recovered")
        finally:
            server.stop()
            proxy.stop()
    assert "Traceback" not in (tmp_path / "server.log").read_text()


def test_a_network_black_hole_answers_503_within_the_pool_timeout(postgres_url, tmp_path):
    """The proxy keeps every connection open and forwards nothing: without a deadline each
    request would wait for the whole partition. Default DATABASE_POOL_TIMEOUT (under 3 s)."""
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlsplit

    from core import settings

    pool_timeout = float(settings.DATABASE_POOL_TIMEOUT.default or "")
    assert pool_timeout < 3
    within = pool_timeout + 1.0  # an answer, not a hang: the client gives up after this
    target = urlsplit(postgres_url)
    proxy = TcpProxy(target.port or 5432).start()
    with fresh_database("postgres", tmp_path, postgres_url) as db_env:
        db_url = db_env["DATABASE_URL"].replace(f":{target.port}", f":{proxy.port}", 1)
        env = worker_env({"DATABASE_URL": db_url}, LOG_FORMAT="json")
        server = start_server(env, tmp_path / "server.log")
        ops = api_key(db_env, "olga", "operator")
        try:
            assert loopback.get(f"{server.url}/readyz").status_code == 200
            assert loopback.get(f"{server.url}/runs/nope", headers=ops).status_code == 404
            proxy.hold()

            def call(i: int) -> int:
                path = "/readyz" if i % 2 else "/runs/nope"
                return loopback.get(f"{server.url}{path}", headers=ops, timeout=within).status_code

            with ThreadPoolExecutor(max_workers=8) as pool:  # more than one round of the pool
                codes = list(pool.map(call, range(24)))
            assert codes == [503] * 24, codes
            assert loopback.get(f"{server.url}/healthz", timeout=within).status_code == 200

            proxy.release()
            for _ in range(60):
                ready = loopback.get(f"{server.url}/readyz", timeout=within).status_code
                api = loopback.get(f"{server.url}/runs/nope", headers=ops, timeout=within)
                if ready == 200 and api.status_code == 404:
                    break
                time.sleep(0.5)  # polls until the app recovers (60 looks at most)
            else:
                pytest.fail("the app did not recover after the network came back")
        finally:
            server.stop()
            proxy.stop()
    assert "Traceback" not in (tmp_path / "server.log").read_text()
