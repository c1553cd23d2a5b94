"""Per-caller limits over real HTTP: rate limits shared by every uvicorn worker, the quota of
open runs, a credential checked before any body is read, and the cap on bodies in flight."""

from __future__ import annotations

import re
import select
import socket
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import fresh_database

from testkit import loopback
from testkit.servers import HOST
from testkit.sockets import read_by_server
from testkit.wait import until
from testkit.webapp import api_key, start_server, worker_env


def _error(reply: httpx.Response, code: str) -> dict:
    error = reply.json()["error"]
    assert set(error) == {"code", "message"} and error["code"] == code, reply.text
    return error


def test_a_hundred_rapid_runs_from_one_key_get_429_across_two_workers(postgres_url, tmp_path):
    with fresh_database("postgres", tmp_path, postgres_url) as db_env:
        env = worker_env(db_env, RATE_LIMIT_RUNS="20/1m", MAX_OPEN_RUNS="0")
        server = start_server(env, tmp_path / "uvicorn.log", workers=2)
        try:
            rita = api_key(db_env, "rita", "requester")

            def start(i: int) -> httpx.Response:
                body = {"input": f"hello {i}", "thread_id": f"t-flood-{i}"}
                return loopback.post(f"{server.url}/runs", json=body, headers=rita, timeout=60)

            with ThreadPoolExecutor(10) as pool:
                replies = list(pool.map(start, range(100)))
        finally:
            server.stop()
    codes = [r.status_code for r in replies]
    assert codes.count(201) == 20 and codes.count(429) == 80, codes
    refused = next(r for r in replies if r.status_code == 429)
    assert int(refused.headers["retry-after"]) >= 1
    assert "RATE_LIMIT_RUNS" in _error(refused, "rate_limited")["message"]


QUESTIONS = "examples.plain_interrupts:parallel_review"  # two plain questions


@pytest.fixture(params=["sqlite", "postgres"])
def limited(request, tmp_path):
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with fresh_database(request.param, tmp_path, pg) as db_env:
        env = worker_env(
            db_env,
            RATE_LIMIT_LOGINS="10/5m",
            RATE_LIMIT_DECISIONS="3/1m",
            API_WORKFLOWS=QUESTIONS,
            MAX_OPEN_RUNS="2",
            MAX_BODY_BYTES_IN_FLIGHT=str(1024 * 1024),
        )
        server = start_server(env, tmp_path / "uvicorn.log")
        try:
            yield server, db_env
        finally:
            server.stop()


def test_fifty_wrong_sign_ins_get_429(limited):
    server, _ = limited
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        reply = browser.get("/inbox/login")
        codes, token = [], ""
        for i in range(50):
            found = re.search(r'name="csrf" value="([^"]+)"', reply.text)
            token = found.group(1) if found else token  # each refusal's page has a new token
            form = {"csrf": token, "credential": f"aw_wrong{i}", "next": "/inbox"}
            reply = browser.post("/inbox/login", data=form)
            codes.append(reply.status_code)
    assert codes[:10] == [401] * 10 and codes[10:] == [429] * 40, codes
    assert "retry-after" in reply.headers
    _error(reply, "rate_limited")


def test_a_requester_has_a_quota_of_open_runs(limited):
    server, db_env = limited
    rita = api_key(db_env, "rita", "requester")
    for order in ("A-1001", "A-1002"):
        body = {"input": f"Refund order {order}: broken"}
        reply = loopback.post(f"{server.url}/runs", json=body, headers=rita, timeout=60)
        assert reply.json()["status"] == "waiting", reply.text
    body = {"input": "Refund order A-1004: broken"}
    third = loopback.post(f"{server.url}/runs", json=body, headers=rita, timeout=60)
    assert third.status_code == 429 and _error(third, "quota_exceeded")
    ron = api_key(db_env, "ron", "requester")  # another requester is not held up
    other = loopback.post(f"{server.url}/runs", json=body, headers=ron, timeout=60)
    assert other.status_code == 201


def test_concurrent_starts_at_the_quotas_edge_never_pass_it(postgres_url, tmp_path):
    """Twelve ``POST /runs`` at once, one run short of the quota, across two uvicorn workers:
    exactly one starts (the count and the insert hold a per-requester lock)."""
    with fresh_database("postgres", tmp_path, postgres_url) as db_env:
        server = start_server(worker_env(db_env, MAX_OPEN_RUNS="3"), tmp_path / "uv.log", workers=2)
        try:
            rita = api_key(db_env, "rita", "requester")

            def start(i: int) -> httpx.Response:
                body = {"input": f"Refund order A-1002: broken ({i})"}
                return loopback.post(f"{server.url}/runs", json=body, headers=rita, timeout=60)

            assert [start(i).json()["status"] for i in range(2)] == ["waiting", "waiting"]
            with ThreadPoolExecutor(12) as pool:
                replies = list(pool.map(start, range(2, 14)))
        finally:
            server.stop()
        from store.db import open_store
        from store.ratelimits import open_runs
        from testkit.databases import pointed_at

        with pointed_at(db_env), open_store() as store:
            assert open_runs(store.db, "rita") == 3
    codes = sorted(r.status_code for r in replies)
    assert codes == [201] + [429] * 11, [r.text for r in replies]
    _error(next(r for r in replies if r.status_code == 429), "quota_exceeded")


def _signed_in(server, headers: dict[str, str]) -> httpx.Client:
    browser = httpx.Client(base_url=server.url, timeout=30)
    token = re.search(r'name="csrf" value="([^"]+)"', browser.get("/inbox/login").text)
    credential = headers["authorization"].removeprefix("Bearer ")
    form = {"csrf": token[1] if token else "", "credential": credential, "next": "/inbox"}
    assert browser.post("/inbox/login", data=form).status_code == 303
    return browser


def test_page_answers_and_decisions_share_the_decision_limit(limited):
    """``RATE_LIMIT_DECISIONS`` counts the answer route as it counts the decide route and the
    API's: one bucket per reviewer, refused attempts included."""
    server, db_env = limited
    rita, bob = api_key(db_env, "rita", "requester"), api_key(db_env, "bob", "reviewer")
    body = {"input": "Launch", "workflow": QUESTIONS}
    started = loopback.post(f"{server.url}/runs", json=body, headers=rita, timeout=60)
    assert started.status_code == 201, started.text
    thread_id, approval = started.json()["thread_id"], started.json()["approval"]
    page = _signed_in(server, bob)
    shown = page.get(f"/inbox/requests/{thread_id}")
    csrf = re.search(r'name="csrf" value="([^"]+)"', shown.text)[1]  # type: ignore[index]
    fields = {
        "csrf": csrf,
        "interrupt_id": approval["interrupt_id"],
        "digest": approval["digest"],
        "position": "0",
        "answer": "no logos",
    }
    path = f"/inbox/requests/{thread_id}/answer"
    codes = [page.post(path, data={**fields, "answer": f"no logos {i}"}) for i in range(4)]
    assert [r.status_code for r in codes[:3]] == [202, 409, 409], [r.text for r in codes]
    assert codes[3].status_code == 429 and int(codes[3].headers["retry-after"]) >= 1
    assert "RATE_LIMIT_DECISIONS" in _error(codes[3], "rate_limited")["message"]
    decided = page.post(f"/inbox/requests/{thread_id}/decide", data=fields)
    assert decided.status_code == 429  # the same bucket as the decide route
    decision = {**{k: fields[k] for k in ("interrupt_id", "digest")}, "decisions": [None, None]}
    api = loopback.post(f"{server.url}/runs/{thread_id}/decision", json=decision, headers=bob)
    assert api.status_code == 429 and _error(api, "rate_limited")  # and the API's
    view = loopback.get(f"{server.url}/runs/{thread_id}", headers=bob, timeout=30).json()
    answers = [(a["position"], a["decision"]["value"]) for a in view["approval"]["answers"]]
    assert answers == [(0, "no logos 0")]


def _declare_body(server, headers: dict[str, str], size: int) -> socket.socket:
    """A POST /runs that declares ``size`` bytes of body and sends none of it (yet)."""
    sock = socket.create_connection((HOST, server.port), timeout=10)
    lines = ["POST /runs HTTP/1.1", f"Host: {HOST}", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()] + [f"Content-Length: {size}", "", ""]
    sock.sendall("\r\n".join(lines).encode())
    return sock


def _status(sock: socket.socket) -> int:
    head = sock.recv(4096).decode("latin-1")
    return int(head.split(" ", 2)[1])


def test_an_unauthenticated_megabyte_is_refused_before_it_is_read(limited):
    server, db_env = limited
    for headers in ({}, {"Authorization": "Bearer aw_nothing_real"}):
        sock = _declare_body(server, headers, 1_000_000)
        try:  # answered without the server waiting for a byte of the body
            assert _status(sock) == 401
        finally:
            sock.close()
    # a caller with a credential: bodies held at once are capped per process, counted on the
    # bytes received; two 900 KB bodies that each sent 600 KB pass the cap (1 MB): the second
    # is refused at once, while the first one waits for the rest of its bytes
    rita = api_key(db_env, "rita", "requester")
    socks = [_declare_body(server, {"Authorization": rita["authorization"]}, 900_000)]
    try:
        socks[0].sendall(b" " * 600_000)
        until(lambda: read_by_server(server.port, socks[0]), "the first 600 KB read", 30)
        socks.append(_declare_body(server, {"Authorization": rita["authorization"]}, 900_000))
        socks[1].sendall(b" " * 600_000)
        ready, _, _ = select.select(socks, [], [], 10)
        assert ready == [socks[1]] and _status(ready[0]) == 503
    finally:
        for sock in socks:
            sock.close()
