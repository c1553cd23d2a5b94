"""Slack buttons decide through the one decision path: a real uvicorn app, ``slack_sdk``'s real
client against a local stand-in of the Slack Web API, interactions signed as Slack signs them."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from conftest import fresh_database, settings_to_clear

from agent.ledger import Ledger
from ops import slack
from store.db import open_store
from testkit import loopback
from testkit.decide import answer
from testkit.slack import SlackStandIn, link_slack, press, signed_interaction
from testkit.webapp import Server, api_key, start_server, wait_for_status, worker_env
from worker.runner import Runner

TOKEN = "xoxb-test-token"
SIGNING = "slack-signing-secret-for-tests"
POLICY = {"SEPARATION_OF_DUTIES": "1", "REFUND_QUORUM_AMOUNT": "500", "REFUND_QUORUM": "2"}


@dataclass
class App:
    server: Server
    db_env: dict[str, str]
    slack: SlackStandIn
    env: dict[str, str]
    keys: dict[str, dict]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def app(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"slack-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    stand_in = SlackStandIn(TOKEN).start()
    env = {
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING,
        "SLACK_CHANNEL": "C0APPROVALS",
        "SLACK_API_URL": stand_in.url,
        **POLICY,
    }
    with fresh_database(request.param, tmp, pg) as db_env:
        server = start_server(worker_env(db_env, **env), tmp / "uvicorn.log")
        keys = {n: api_key(db_env, n, "reviewer") for n in ("bob", "carol", "rita")}
        yield App(server, db_env, stand_in, env, keys)
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


def link(app: App, who: str, slack_user: str) -> None:
    link_slack(app.server.url, app.keys[who], slack_user, SIGNING)


def posted(app: App, runner: Runner, thread_id: str, order: str = "A-1005", by: str = "rita"):
    outcome = runner.start(
        f"Refund order {order}: arrived broken", thread_id=thread_id, requested_by=by
    )
    assert outcome.status == "waiting", outcome
    slack.drain()
    [(ts, message)] = [(ts, m) for ts, m in app.slack.messages.items() if _about(m, thread_id)]
    return outcome, ts, message


def _about(message: dict, thread_id: str) -> bool:
    """The run a message is about, as its buttons carry it (its text names no id)."""
    return f'"t": "{thread_id}"' in str(message.get("blocks"))


def click(app: App, payload: dict, secret: str = SIGNING, at: float | None = None):
    body, headers = signed_interaction(payload, secret, at)
    return loopback.post(
        f"{app.server.url}/slack/interactions", content=body, headers=headers, timeout=30
    )


def shown(app: App, ts: str, words: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = app.slack.messages[ts]["text"]
        if words in text:
            return text
        time.sleep(0.05)  # polls until the message says it (deadline above)
    raise AssertionError(f"the message never said {words!r}: {text!r}")


def refunds(runner: Runner, order: str) -> int:
    return sum(1 for r in Ledger(runner.store.db).refunds() if r["order_id"] == order)


def test_approve_by_button_runs_the_refund_once_and_forgeries_and_replays_change_nothing(
    app, runner
):
    link(app, "bob", "UBOB")
    _, ts, message = posted(app, runner, "t-slack-ok")
    assert "EUR" in message["text"] and "Approve" in str(message["blocks"])
    forged = click(app, press(message, "approve", "UBOB"), secret="not-the-secret")
    assert forged.status_code == 401 and forged.json()["error"]["code"] == "bad_signature"
    stale = click(app, press(message, "approve", "UBOB"), at=time.time() - 600)
    assert stale.status_code == 401
    assert runner.runs.get("t-slack-ok").status == "waiting"
    body, headers = signed_interaction(press(message, "approve", "UBOB"), SIGNING)
    url = f"{app.server.url}/slack/interactions"
    first = loopback.post(url, content=body, headers=headers, timeout=30)
    assert first.status_code == 200, first.text
    wait_for_status(app.server.url, "t-slack-ok", "done")
    again = loopback.post(url, content=body, headers=headers, timeout=30)
    assert again.status_code == 409 and again.json()["error"]["code"] == "replayed"
    assert refunds(runner, "A-1005") == 1
    claim = runner.runs.last_claim("t-slack-ok")
    assert claim.detail["approvers"] == ["bob"] and claim.detail["source"] == "slack"
    assert "bob" in shown(app, ts, "Approved")


def test_unlinked_and_requester_are_refused(app, runner):
    _, _, message = posted(app, runner, "t-slack-who", order="A-1001", by="rita")
    unlinked = click(app, press(message, "approve", "UNOBODY"))
    assert unlinked.status_code == 403 and unlinked.json()["error"]["code"] == "unlinked"
    link(app, "rita", "URITA")
    own = click(app, press(message, "approve", "URITA"))
    assert own.status_code == 403 and own.json()["error"]["code"] == "duties"
    assert runner.runs.get("t-slack-who").status == "waiting"


def test_two_linked_users_complete_a_quorum(app, runner):
    link(app, "bob", "UBOB")
    link(app, "carol", "UCAROL")
    _, ts, message = posted(app, runner, "t-slack-two", order="A-1004")
    one = click(app, press(message, "approve", "UBOB"))
    assert one.status_code == 200 and one.json()["status"] == "approval recorded"
    shown(app, ts, "1 of 2 approvals")
    assert runner.runs.get("t-slack-two").status == "waiting"
    two = click(app, press(message, "approve", "UCAROL"))
    assert two.status_code == 200 and two.json()["status"] == "accepted", two.text
    wait_for_status(app.server.url, "t-slack-two", "done")
    assert refunds(runner, "A-1004") == 1


def test_a_decision_in_the_web_inbox_shows_in_the_message(app, runner):
    outcome, ts, _ = posted(app, runner, "t-slack-web", order="A-1002")
    answer(runner, outcome.interrupt_id, [{"type": "reject", "message": "not ours"}], "carol")
    runner.sweep()
    slack.drain()
    # the claim's update says "Rejected" first; the run's end adds the reason
    text = shown(app, ts, "(not ours)")
    assert text.startswith("*Rejected* by carol"), text
