"""Each channel has its own sender (issue 37): while the mail server sits on a message, the
pause's webhook and its Slack post still go out; the mail lane keeps one SMTP session for a
round of messages; the webhooks reuse one HTTP connection. In process (the process that paused
sends), ``slack_sdk`` against the local Slack stand-in, ``smtplib`` against a local
``aiosmtpd`` server, a local webhook receiver, all on 127.0.0.1, both backends."""

from __future__ import annotations

import threading

import pytest

from inbox.outbox import FLUSHER, http_client
from store.keys import KeyStore, parse_roles
from testkit.clock import runner_at, waiting
from testkit.mail import MailBox
from testkit.receiver import Receiver
from testkit.slack import SlackStandIn
from testkit.wait import until

TOKEN = "xoxb-lanes-test-token"
ADDRESS = {n: f"{n}@example.test" for n in ("bob", "carol", "dave")}


@pytest.fixture
def channels(store, monkeypatch):
    """Webhook, Slack and e-mail all on, each served on 127.0.0.1."""
    receiver = Receiver(keep_alive=True).start()
    stand_in, box = SlackStandIn(TOKEN).start(), MailBox().start()
    env = {
        "NOTIFY_URLS": receiver.url,
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": "slack-signing-secret-for-lanes",
        "SLACK_CHANNEL": "C0APPROVALS",
        "SLACK_API_URL": stand_in.url,
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(box.port),
        "SMTP_TLS": "none",
        "EMAIL_FROM": "Approvals <approvals@example.test>",
        "EMAIL_LINK_SECRET": "link-secret-for-lanes-tests-0123456789",
        "PUBLIC_URL": "https://approvals.example.test",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    keys = KeyStore(store.db)
    for name, address in ADDRESS.items():
        keys.create(name, parse_roles(["reviewer"]), email=address)
    yield receiver, stand_in, box
    box.release()
    FLUSHER.wait()
    box.stop()
    stand_in.stop()
    receiver.stop()


def requested(receiver: Receiver, thread_id: str) -> list[dict]:
    return [
        r.json
        for r in receiver.got
        if r.json["type"] == "approval.requested" and r.json["data"]["thread_id"] == thread_id
    ]


def test_a_stuck_mail_server_holds_back_neither_the_webhook_nor_slack(store, clock, channels):
    receiver, stand_in, box = channels
    box.hold()  # the mail server answers no message until released
    runner = runner_at(store, clock)
    waiting(runner, "t-lanes")
    # the mail lane is stuck inside its first SMTP exchange; the other lanes are not behind it
    until(lambda: requested(receiver, "t-lanes"), "approval.requested at the webhook")
    until(lambda: stand_in.messages, "the request posted to Slack")
    assert box.received == []  # every message still held by the mail server
    box.release()
    until(lambda: len(box.received) == len(ADDRESS), "each reviewer's mail")
    FLUSHER.wait()
    assert sorted(r[0] for r, _ in box.received) == sorted(ADDRESS.values())


def test_the_mail_lane_keeps_one_smtp_session_for_a_round(store, clock, channels):
    _, _, box = channels
    box.hold()  # the three messages are owed together before the first is answered
    runner = runner_at(store, clock)
    waiting(runner, "t-session")
    box.release()
    until(lambda: len(box.received) == len(ADDRESS), "each reviewer's mail")
    FLUSHER.wait()
    assert len(set(box.peers)) == 1, box.peers  # one connection (one client port) for all three


def test_webhooks_reuse_one_connection(store, clock, channels):
    receiver, _, _ = channels
    runner = runner_at(store, clock)
    waiting(runner, "t-keep-1")
    until(lambda: requested(receiver, "t-keep-1"), "the first request's webhook")
    waiting(runner, "t-keep-2")
    until(lambda: requested(receiver, "t-keep-2"), "the second request's webhook")
    FLUSHER.wait()
    assert http_client() is http_client()  # one pool for the process, kept between rounds
    peers = {r.headers.get("x-peer") for r in receiver.got}
    assert len(peers) == 1, peers  # both deliveries over the same kept-alive connection


def test_a_sweep_sends_owed_webhooks_before_the_mail(store, clock, channels, monkeypatch):
    receiver, _, box = channels
    monkeypatch.setenv("WEBHOOK_RETRY_BASE_SECONDS", "0")  # due again at once
    receiver.stop()  # the webhook receiver is down at the pause: its event stays owed
    box.hold()
    runner = runner_at(store, clock)
    waiting(runner, "t-sweep-order")
    FLUSHER.wait(lanes=["webhook"])  # the pause's own attempt failed
    assert requested(receiver, "t-sweep-order") == []
    receiver.start()
    sweep = threading.Thread(target=runner.sweeper.flush_outbox)
    sweep.start()
    # the sweep sends the owed webhook although the mail server still sits on every message
    until(lambda: requested(receiver, "t-sweep-order"), "the owed webhook, sent by the sweep")
    assert box.received == []
    box.release()
    sweep.join(60)
    assert not sweep.is_alive()
