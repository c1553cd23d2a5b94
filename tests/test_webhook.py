"""The webhook receiver under a real uvicorn on 127.0.0.1, fed real Svix-signed deliveries."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from conftest import ROOT, fresh_database, settings_to_clear

from agent.ledger import Ledger
from store.db import open_store
from store.states import Event
from testkit import loopback, zygote
from testkit.decide import answer
from testkit.webapp import (
    OTHER_SECRET,
    SECRET,
    Server,
    answered_event,
    api_key,
    approve_item,
    free_port,
    sign,
    start_server,
    uvicorn_command,
    wait_for_status,
    worker_env,
)
from worker.runner import Runner


@dataclass
class App:
    server: Server
    db_env: dict[str, str]
    backend: str
    rita: dict | None = None  # headers of a requester
    bob: dict | None = None  # a reviewer
    olga: dict | None = None  # an operator


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def app(request, tmp_path_factory):
    """One running app per backend for the module; tests use distinct thread ids."""
    tmp = tmp_path_factory.mktemp(f"webhook-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with fresh_database(request.param, tmp, pg) as db_env:
        server = start_server(worker_env(db_env), tmp / "uvicorn.log")
        yield App(
            server,
            db_env,
            request.param,
            rita=api_key(db_env, "rita", "requester"),
            bob=api_key(db_env, "bob", "reviewer"),
            olga=api_key(db_env, "olga", "operator"),
        )
        server.stop()


@pytest.fixture
def runner(app, monkeypatch, tmp_path):
    """An in-process runner on the app's database (to set up runs and read state)."""
    for name in settings_to_clear():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    for name, value in app.db_env.items():
        monkeypatch.setenv(name, value)
    with open_store() as store:
        Ledger(store.db).clear()  # the module's tests share a database, each refunds A-1001
        yield Runner(store)


def snapshot(runner: Runner) -> dict:
    db = runner.store.db
    return {
        t: db.all(f"SELECT * FROM {t} ORDER BY 1") for t in ("runs", "refunds", "inbox_requests")
    }


def waiting_run(runner: Runner, thread_id: str, order: str = "A-1001") -> str:
    outcome = runner.start(f"Refund order {order}: arrived broken", thread_id=thread_id)
    assert outcome.status == "waiting"
    return outcome.interrupt_id


def post(app: App, body: str | bytes, headers: dict, source: str = "vigilator") -> httpx.Response:
    return loopback.post(
        f"{app.server.url}/webhooks/{source}", content=body, headers=headers, timeout=30
    )


# -- the happy path -------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def slow_app(request, tmp_path_factory):
    """An app whose resumes start 1.5 s late, to see that the 2xx does not wait for them."""
    tmp = tmp_path_factory.mktemp(f"slow-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with fresh_database(request.param, tmp, pg) as db_env:
        env = worker_env(db_env, FAULTS="resume.start=sleep:1.5")
        server = start_server(env, tmp / "uvicorn.log")
        yield App(server, db_env, request.param)
        server.stop()


def test_signed_delivery_resumes_the_run_and_the_response_comes_first(slow_app, monkeypatch):
    for name, value in slow_app.db_env.items():
        monkeypatch.setenv(name, value)
    with open_store() as store:
        runner = Runner(store)
        interrupt_id = waiting_run(runner, "t-happy")
        body = answered_event(interrupt_id, "t-happy", [approve_item()])
        response = post(slow_app, body, sign(body))
        assert response.status_code == 202, response.text
        assert response.json() == {"status": "accepted", "thread_id": "t-happy"}
        # The claim is committed before the answer; the resume has not run yet.
        assert runner.runs.get("t-happy").status == "resuming"
        assert Ledger(store.db).refunds() == []
        view = wait_for_status(slow_app.server.url, "t-happy", "done")
        assert view["result"].startswith("Refunded 49.90 EUR for order A-1001")
        assert len(Ledger(store.db).refunds()) == 1
        claim = [e for e in runner.runs.events("t-happy") if e.reason == "decision claimed"]
        assert claim[0].detail["approvers"] == ["alice"]


def test_secret_rotation_two_signatures_one_valid(app, runner):
    interrupt_id = waiting_run(runner, "t-rotate")
    body = answered_event(interrupt_id, "t-rotate", [approve_item()])
    good = sign(body)
    old = sign(body, secret=OTHER_SECRET)["svix-signature"]
    headers = {**good, "svix-signature": f"{old} {good['svix-signature']}"}
    assert post(app, body, headers).status_code == 202
    wait_for_status(app.server.url, "t-rotate", "done")


def test_edit_and_reject_arrive_as_decisions(app, runner):
    edit_id = waiting_run(runner, "t-wh-edit")
    args = {"order_id": "A-1001", "amount": 12.0, "reason": "goodwill"}
    body = answered_event(
        edit_id, "t-wh-edit", [{"name": "issue_refund", "decision": "edit", "editedArgs": args}]
    )
    assert post(app, body, sign(body, msg_id="m-edit")).status_code == 202
    assert "Refunded 12.00 EUR" in wait_for_status(app.server.url, "t-wh-edit", "done")["result"]

    reject_id = waiting_run(runner, "t-wh-reject")
    body = answered_event(
        reject_id,
        "t-wh-reject",
        [{"name": "issue_refund", "decision": "reject", "responseText": "duplicate claim"}],
    )
    assert post(app, body, sign(body, msg_id="m-rej")).status_code == 202
    view = wait_for_status(app.server.url, "t-wh-reject", "done")
    assert view["result"] == "The refund was declined by the reviewer: duplicate claim"
    assert [r["thread_id"] for r in Ledger(runner.store.db).refunds("t-wh-reject")] == []


# -- bad deliveries -------------------------------------------------------------------------


def _minus(headers: dict, name: str) -> dict:
    return {k: v for k, v in headers.items() if k != name}


def _cases(interrupt_id: str, thread_id: str):
    good = answered_event(interrupt_id, thread_id, [approve_item()])
    now = datetime.now(UTC)
    signed = sign(good)
    invalid_shape = json.dumps({"type": "interrupt.answered", "data": {"id": 7}})
    bad_decision = answered_event(
        interrupt_id, thread_id, [{"name": "issue_refund", "decision": "maybe"}]
    )
    foreign = answered_event(interrupt_id, thread_id, [approve_item()], app="someone-else")
    unknown = answered_event(interrupt_id, "t-never-started", [approve_item()])
    stale = answered_event("0b8a0c1e-0000-4000-8000-000000000000", thread_id, [approve_item()])
    two = answered_event(interrupt_id, thread_id, [approve_item(), approve_item()])
    return [
        ("missing svix-id", good, _minus(signed, "svix-id"), 400),
        ("missing svix-timestamp", good, _minus(signed, "svix-timestamp"), 400),
        ("missing svix-signature", good, _minus(signed, "svix-signature"), 400),
        ("wrong signature", good, sign(good, secret=OTHER_SECRET), 400),
        ("signature without comma", good, {**signed, "svix-signature": "v1abc"}, 400),
        ("signature not base64", good, {**signed, "svix-signature": "v1,@@@"}, 400),
        ("timestamp 6 minutes old", good, sign(good, at=now - timedelta(minutes=6)), 400),
        ("timestamp 6 minutes ahead", good, sign(good, at=now + timedelta(minutes=6)), 400),
        ("body tampered after signing", good.replace("alice", "mallory"), signed, 400),
        ("non-UTF-8 body", b"\xff\xfe" + good.encode(), signed, 400),
        ("non-JSON", "not json", sign("not json"), 422),
        ("JSON but not an object", "[1, 2]", sign("[1, 2]"), 422),
        ("wrong event shape", invalid_shape, sign(invalid_shape), 422),
        ("unknown decision", bad_decision, sign(bad_decision), 422),
        ("externalId of another app", foreign, sign(foreign), 200),
        ("unknown thread", unknown, sign(unknown), 200),
        ("interrupt no longer waited on", stale, sign(stale), 200),
        ("decision count does not match", two, sign(two), 200),
    ]


CASE_NAMES = [c[0] for c in _cases("x", "y")]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_delivery_is_refused_or_ignored_and_changes_nothing(app, runner, case):
    thread_id = f"t-bad-{CASE_NAMES.index(case)}"
    interrupt_id = waiting_run(runner, thread_id)
    _, body, headers, expected = next(c for c in _cases(interrupt_id, thread_id) if c[0] == case)
    before = snapshot(runner)
    response = post(app, body, headers)
    assert response.status_code == expected, response.text
    payload = response.json()
    if expected == 200:
        assert payload["status"] == "ignored" and payload["reason"]
    else:
        assert payload["error"]
    assert snapshot(runner) == before


def test_oversized_bodies_get_413_without_being_read(app, runner):
    before = snapshot(runner)
    big = b"x" * (1024 * 1024 + 1)
    declared = post(app, big, sign("x"))
    assert declared.status_code == 413

    def chunks():
        for _ in range(33):
            yield b"y" * 32768  # 1 MiB + 32 KiB, no Content-Length: chunked

    chunked = loopback.post(
        f"{app.server.url}/webhooks/vigilator", content=chunks(), headers=sign("y"), timeout=30
    )
    assert chunked.status_code == 413
    assert snapshot(runner) == before


def test_unknown_source_is_404(app):
    body = "{}"
    assert post(app, body, sign(body), source="github").status_code == 404


@pytest.mark.parametrize("event_type", ["interrupt.created", "interrupt.escalated", "odd.new"])
def test_other_event_types_are_acknowledged_and_recorded(app, runner, event_type):
    interrupt_id = waiting_run(runner, f"t-other-{event_type}")
    body = json.dumps(
        {
            "type": event_type,
            "data": {"id": interrupt_id, "externalId": f"approval-worker:t-other-{event_type}"},
        }
    )
    before = snapshot(runner)
    response = post(app, body, sign(body, msg_id=f"m-{event_type}"))
    assert response.status_code == 200
    assert response.json() == {"status": "recorded", "type": event_type}
    assert snapshot(runner) == before
    events = runner.runs.events(f"t-other-{event_type}")
    assert events[-1].reason == f"event {event_type}"
    assert events[-1].detail["svix_id"] == f"m-{event_type}"


# -- races ----------------------------------------------------------------------------------


def test_fifty_duplicate_deliveries_and_a_sweep_resume_once(app, runner):
    interrupt_id = waiting_run(runner, "t-storm", order="A-1005")
    answer(runner, interrupt_id, [{"type": "approve"}], "alice")  # recover.py can see it
    body = answered_event(interrupt_id, "t-storm", [approve_item()])
    headers = sign(body, msg_id="msg_storm")  # a redelivery keeps its svix-id
    go = threading.Event()

    def deliver(_):
        go.wait()
        return post(app, body, headers).status_code

    sweep_env = worker_env(app.db_env)
    with ThreadPoolExecutor(max_workers=50) as pool:
        futures = [pool.submit(deliver, i) for i in range(50)]
        sweeper = zygote.popen(
            [sys.executable, str(ROOT / "recover.py")],
            env=sweep_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        go.set()
        codes = [f.result(timeout=60) for f in futures]
    swept, errors = sweeper.communicate(timeout=120)
    assert sweeper.returncode == 0, errors
    # every delivery is acknowledged; those that found the claim still queued say 202 (they
    # woke a resumer), the rest 200. The claim and its taking-up are the ones counted, below.
    assert set(codes) <= {200, 202}, codes
    wait_for_status(app.server.url, "t-storm", "done")
    assert len(Ledger(runner.store.db).refunds("t-storm")) == 1
    claims = [e for e in runner.runs.events("t-storm") if e.reason == "decision claimed"]
    assert len(claims) == 1
    # the queued claim was taken once: by the app's resumer (woken by the claim's NOTIFY or a
    # delivery) or by the sweep, whichever came first
    taken = [e for e in runner.runs.events("t-storm") if e.reason == Event.TAKEN_UP]
    assert len(taken) == 1, (taken, codes, swept)


# -- status API -----------------------------------------------------------------------------


def test_status_api(app, runner):
    url = app.server.url
    assert loopback.get(f"{url}/runs/t-nobody").status_code == 401
    assert loopback.get(f"{url}/runs/t-nobody", headers=app.bob).status_code == 404
    health = loopback.get(f"{url}/healthz").json()
    from core import version

    assert health == {"status": "ok", "database": app.backend, "version": version.current()}

    started = loopback.post(
        f"{url}/runs",
        json={"input": "Refund order A-1002: leaks", "thread_id": "t-api"},
        headers=app.rita,
    )
    assert started.status_code == 201, started.text
    view = started.json()
    assert view["status"] == "waiting" and view["requested_by"] == "rita"
    api = view["thread_id"]  # the name rita chose, in her own namespace
    assert api.startswith("t-api.") and api != "t-api"
    approval = view["approval"]
    assert approval["action_requests"][0]["args"]["amount"] == "329.00"
    assert approval["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject"]

    again = loopback.post(
        f"{url}/runs",
        json={"input": "Refund order A-1002: leaks", "thread_id": "t-api"},
        headers=app.rita,
    )
    assert again.status_code == 200 and again.json()["approval"] == approval
    assert again.json()["thread_id"] == api
    copies = runner.store.db.all(
        "SELECT id FROM inbox_requests WHERE external_id = :e", {"e": f"approval-worker:{api}"}
    )
    assert len(copies) == 1

    body = answered_event(approval["interrupt_id"], api, [approve_item()])
    assert post(app, body, sign(body, msg_id="m-api")).status_code == 202
    done = wait_for_status(url, api, "done")
    assert "Refunded 329.00 EUR" in done["result"] and "approval" not in done

    for bad in (
        {},
        {"input": ""},
        {"input": "x", "thread_id": "no spaces allowed"},
        {"input": "Refund A-1001", "workflow": "payroll"},
    ):
        assert loopback.post(f"{url}/runs", json=bad, headers=app.rita).status_code == 422, bad


# -- the local inbox delivers signed webhooks -----------------------------------------------


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return zygote.run(
        [sys.executable, "-m", "inbox", *args],
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_local_inbox_delivery_reaches_the_app(app, runner):
    interrupt_id = waiting_run(runner, "t-local")
    env = worker_env(app.db_env, WEBHOOK_URL=f"{app.server.url}/webhooks/local")
    proc = _cli(env, "approve", interrupt_id, "--by", "bob")
    assert proc.returncode == 0, proc.stderr
    assert f"to {app.server.url}/webhooks/local" in proc.stdout and "delivered" in proc.stdout
    wait_for_status(app.server.url, "t-local", "done")
    assert len(Ledger(runner.store.db).refunds("t-local")) == 1


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_delivery_that_fails_while_the_app_is_down_is_retried_and_lands(backend, tmp_path):
    import os

    db_env = {k: os.environ[k] for k in ("SQLITE_PATH", "DATABASE_URL") if k in os.environ}
    port = free_port()
    with open_store() as store:
        runner = Runner(store)
        interrupt_id = waiting_run(runner, "t-late")
        env = worker_env(
            db_env,
            WEBHOOK_URL=f"http://127.0.0.1:{port}/webhooks/local",
            WEBHOOK_RETRY_BASE_SECONDS="0.2",
        )
        proc = _cli(env, "approve", interrupt_id)
        assert proc.returncode == 0, proc.stderr
        assert "failed" in proc.stdout and "will be retried" in proc.stdout
        run = runner.runs.get("t-late")  # decided, and handed off to whoever takes it up
        assert run.status == "resuming" and run.owner.startswith("handoff:")

        server = start_server(worker_env(db_env), tmp_path / "uvicorn.log", port=port)
        try:
            proc = _cli(env, "deliver", "--wait")
            assert proc.returncode == 0, proc.stderr
            assert "delivered" in proc.stdout
            wait_for_status(server.url, "t-late", "done")
        finally:
            server.stop()
        assert len(Ledger(store.db).refunds("t-late")) == 1
        [row] = store.db.all("SELECT attempts, delivered_at FROM webhook_outbox")
        assert row["attempts"] == 2 and row["delivered_at"] is not None


@pytest.mark.parametrize("secret", ["", "not base64 !!", "whsec_YQ=="])
def test_the_app_refuses_to_start_without_a_valid_secret(tmp_path, secret):
    env = worker_env(
        {"SQLITE_PATH": str(tmp_path / "a.db")},
        WEBHOOK_SECRET=secret,
        VIGILATOR_WEBHOOK_SECRET="",
    )
    proc = zygote.run(
        uvicorn_command("webhook:app", free_port()),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: WEBHOOK_SECRET"), proc.stderr
    assert "whsec_" in lines[0]  # says how to make one
    if secret:
        assert secret not in proc.stderr
    assert SECRET not in proc.stderr


def test_a_late_decision_gets_410_from_the_api_and_an_ignored_200_as_a_webhook(app, runner):
    url = app.server.url
    started = loopback.post(
        f"{url}/runs",
        json={
            "input": "Refund order A-1001: broken",
            "thread_id": "t-late-api",
            "expires_in": "2h",
        },
        headers=app.rita,
    )
    view = started.json()
    late_api = view["thread_id"]
    assert view["expires_at"] == pytest.approx(view["updated_at"] + 7200)
    waiting_run(runner, "t-late-wh")
    runner.store.db.execute("UPDATE runs SET expires_at = 1 WHERE thread_id LIKE 't-late-%'")

    late = loopback.post(
        f"{url}/runs/{late_api}/decision",
        json={
            "interrupt_id": view["approval"]["interrupt_id"],
            "digest": view["approval"]["digest"],
            "decisions": [{"type": "approve"}],
        },
        headers=app.bob,
    )
    assert late.status_code == 410, late.text
    wh_id = runner.runs.get("t-late-wh").interrupt_id
    body = answered_event(wh_id, "t-late-wh", [{"name": "issue_refund", "decision": "approve"}])
    reply = post(app, body, sign(body, msg_id="m-late"))
    assert reply.status_code == 200
    assert reply.json()["status"] == "ignored" and reply.json()["code"] == "expired"
    said = reply.json()["reason"]  # in words, the zone named; the ids and the stamp in details
    assert said.startswith("this request expired on Thu 1 Jan 1970, 00:00 (UTC)"), said
    assert wh_id not in said and reply.json()["details"]["request"] == wh_id
    assert reply.json()["details"]["expired_at"] == "1970-01-01T00:00:01Z"
    for thread_id in (late_api, "t-late-wh"):
        assert runner.runs.get(thread_id).status == "waiting"  # the sweep expires it
        # a refusal, from any source, changes no table
        events = runner.runs.events(thread_id)
        assert [e.reason for e in events][-1] == "paused for approval"
    assert Ledger(runner.store.db).refunds(late_api) == []

    in_time = waiting_run(runner, "t-api-decide")
    digest = runner.runs.get("t-api-decide").request_digest
    decision = {"interrupt_id": in_time, "digest": digest, "decisions": [{"type": "approve"}]}
    url_decide = f"{url}/runs/t-api-decide/decision"
    accepted = loopback.post(url_decide, json=decision, headers=app.bob)
    assert accepted.status_code == 202, accepted.text
    assert "Refunded" in wait_for_status(url, "t-api-decide", "done")["result"]
    assert loopback.post(url_decide, json=decision, headers=app.bob).status_code == 409


def test_cancel_and_history_over_the_api(app, runner):
    url = app.server.url
    waiting_run(runner, "t-api-cancel")
    cancelled = loopback.post(
        f"{url}/runs/t-api-cancel/cancel", json={"reason": "duplicate"}, headers=app.olga
    )
    assert cancelled.status_code == 200, cancelled.text
    view = cancelled.json()
    assert view["status"] == "cancelled" and view["cancel_reason"] == "duplicate"
    assert view["result"] == "Cancelled (duplicate); nothing was done."
    assert loopback.post(f"{url}/runs/t-api-cancel/cancel", headers=app.olga).status_code == 409
    assert loopback.post(f"{url}/runs/t-nobody/cancel", headers=app.olga).status_code == 404

    story = loopback.get(f"{url}/runs/t-api-cancel/history", headers=app.olga).json()
    assert [e["reason"] for e in story["events"]] == ["started", "paused for approval", "cancelled"]
    assert story["events"][1]["summary"].startswith("proposed issue_refund(")
    assert story["events"][-1]["actor"] == "api:olga"
    assert loopback.get(f"{url}/runs/t-nobody/history", headers=app.olga).status_code == 404
