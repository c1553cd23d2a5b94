"""A Slack press never makes its presser wait on the database, and is told what became of it
in words (issue 37). A real uvicorn app, ``slack_sdk`` against the local Slack stand-in (which
also plays each press's ``response_url``), interactions signed as Slack signs them, both
backends: while another connection holds the write lock (SQLite) or the run's row (Postgres),
as a long sweep does, a press is acknowledged within ``SLACK_ACK_SECONDS`` and its decision
finishes after, its outcome sent to the presser; bad headers are 401 with no traceback."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import fresh_database, settings_to_clear

from ops import slack
from store.db import open_store
from testkit import loopback
from testkit.slack import SlackStandIn, link_slack, press, signed_interaction
from testkit.wait import until
from testkit.webapp import Server, api_key, start_server, wait_for_status, worker_env
from worker.runner import Runner

TOKEN = "xoxb-ack-test-token"
SIGNING = "slack-signing-secret-for-ack-tests"


@dataclass
class App:
    server: Server
    db_env: dict[str, str]
    slack: SlackStandIn
    env: dict[str, str]
    keys: dict[str, dict]
    log: Path


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def app(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"slack-ack-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    stand_in = SlackStandIn(TOKEN).start()
    env = {
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING,
        "SLACK_CHANNEL": "C0APPROVALS",
        "SLACK_API_URL": stand_in.url,
        "SLACK_ACK_SECONDS": "0.3",
    }
    with fresh_database(request.param, tmp, pg) as db_env:
        log = tmp / "uvicorn.log"
        server = start_server(worker_env(db_env, **env), log)
        keys = {n: api_key(db_env, n, "reviewer") for n in ("bob", "carol")}
        link_slack(server.url, keys["bob"], "UBOB", SIGNING)
        link_slack(server.url, keys["carol"], "UCAROL", SIGNING)
        yield App(server, db_env, stand_in, env, keys, log)
        server.stop()
    stand_in.stop()


@pytest.fixture
def runner(app, monkeypatch, tmp_path):
    for name in settings_to_clear():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    for name, value in {**app.db_env, **app.env}.items():
        monkeypatch.setenv(name, value)
    with open_store() as store:
        yield Runner(store)


def posted(app: App, runner: Runner, thread_id: str, order: str) -> dict:
    outcome = runner.start(f"Refund order {order}: arrived broken", thread_id=thread_id,
                           requested_by="rita")  # fmt: skip
    assert outcome.status == "waiting", outcome
    slack.drain()
    mark = f'"t": "{thread_id}"'
    return next(m for m in app.slack.messages.values() if mark in str(m.get("blocks")))


def click(app: App, payload: dict, headers: dict | None = None) -> httpx.Response:
    body, signed = signed_interaction(payload, SIGNING)
    sent = signed if headers is None else headers
    url = f"{app.server.url}/slack/interactions"
    return loopback.post(url, content=body, headers=sent, timeout=30)


@contextmanager
def write_held(app: App, thread_id: str) -> Iterator[None]:
    """Another connection holds what a decision must write: SQLite's one write lock (as a sweep
    of thousands of runs does), or on Postgres the run's row."""
    if "SQLITE_PATH" in app.db_env:
        conn = sqlite3.connect(app.db_env["SQLITE_PATH"], isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    import psycopg

    with psycopg.connect(app.db_env["DATABASE_URL"]) as pg:
        pg.execute("SELECT 1 FROM runs WHERE thread_id = %s FOR UPDATE", (thread_id,))
        yield
        pg.rollback()


def test_bad_slack_headers_are_401_in_the_one_shape_with_no_traceback(app):
    payload = {"type": "block_actions", "user": {"id": "UBOB"}, "actions": []}
    body, good = signed_interaction(payload, SIGNING)
    stamp = "x-slack-request-timestamp"
    bad = {
        "no timestamp": {k: v for k, v in good.items() if k != stamp},
        "words": {**good, stamp: "yesterday"},
        "empty": {**good, stamp: ""},
        "exponent": {**good, stamp: "1e9"},
        "huge": {**good, stamp: "9" * 40},
        "no signature": {k: v for k, v in good.items() if k != "x-slack-signature"},
        "wrong signature": {**good, "x-slack-signature": "v0=" + "0" * 64},
    }
    for why, headers in bad.items():
        got = loopback.post(f"{app.server.url}/slack/interactions", content=body, headers=headers)
        assert got.status_code == 401, (why, got.text)
        assert got.json() == {
            "error": {"code": "bad_signature", "message": "Slack signature verification failed"}
        }, why
    slash = loopback.post(f"{app.server.url}/slack/commands", content=b"text=link",
                       headers=bad["words"])  # fmt: skip
    assert slash.status_code == 401
    assert app.slack.responses == []  # an unsigned press is never answered anywhere
    assert "Traceback" not in app.log.read_text()


def test_a_refusal_is_told_to_the_presser_in_words(app, runner):
    message = posted(app, runner, "t-ack-words", "A-1001")
    unlinked = click(app, press(message, "approve", "UNOBODY", app.slack.response_url("nobody")))
    assert unlinked.status_code == 403 and unlinked.json()["error"]["code"] == "unlinked"
    [told] = until(lambda: app.slack.told("nobody"), "the words sent to the unlinked presser")
    assert told.startswith("Not taken: link your Slack user first"), told
    assert runner.runs.get("t-ack-words").status == "waiting"


def test_a_press_behind_a_held_write_is_acknowledged_then_finished_and_told(app, runner):
    message = posted(app, runner, "t-ack-held", "A-1005")
    with write_held(app, "t-ack-held"):
        got = click(app, press(message, "approve", "UBOB", app.slack.response_url("bob")))
        # answered while the write is still held: the acknowledgement did not wait for it
        assert got.status_code == 200 and got.json() == {"status": "acknowledged"}, got.text
        assert runner.runs.get("t-ack-held").status == "waiting"
        assert app.slack.told("bob") == []  # nothing decided yet, so nothing said
    wait_for_status(app.server.url, "t-ack-held", "done")
    [told] = until(lambda: app.slack.told("bob"), "the outcome sent to the presser")
    assert told == "Your decision was recorded; the message will show the outcome."
    claim = runner.runs.last_claim("t-ack-held")
    assert claim.detail["approvers"] == ["bob"] and claim.detail["source"] == "slack"
    # a press that comes late to a decided request, behind a held write: the refusal is read,
    # not written, so the presser reads it while the write is still held. It is the answer
    # itself (409) when the read beats SLACK_ACK_SECONDS, else the press is acknowledged and
    # the words follow; a refusal that needed the write would wait for the release either way.
    with write_held(app, "t-ack-held"):
        late = click(app, press(message, "reject", "UCAROL", app.slack.response_url("carol")))
        [refusal] = until(lambda: app.slack.told("carol"), "the late refusal sent to the presser")
    if late.status_code == 200:
        assert late.json() == {"status": "acknowledged"}, late.text
    else:
        assert late.status_code == 409 and late.json()["error"]["code"] == "decided", late.text
    assert refusal.startswith("Not taken: ") and "bob" in refusal, refusal
    assert runner.runs.get("t-ack-held").status == "done"
