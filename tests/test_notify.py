"""Lifecycle notifications: one per event kind, signed per Standard Webhooks, the Slack format,
and a receiver that was down gets every event exactly once (local receivers on 127.0.0.1)."""

from __future__ import annotations

import base64

import pytest
from test_lifecycle import HOUR, Clock, runner_at, waiting

from testkit.receiver import Receiver

NOTIFY_SECRET = "whsec_" + base64.b64encode(b"notify-secret-for-tests-32bytes!").decode()
ALL_KINDS = {
    "approval.requested",
    "approval.reminder",
    "approval.escalated",
    "approval.expired",
    "run.done",
    "run.failed",
    "run.cancelled",
}


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def every_kind(store, clock, monkeypatch):
    """Drive runs through each notified event; returns the runner."""
    runner = runner_at(store, clock)
    waiting(runner, "t-ladder", expires_in="10h")  # requested
    clock.now += 5 * HOUR
    runner.sweeper.climb_ladder()  # reminder
    clock.now += 3 * HOUR
    runner.sweeper.climb_ladder()  # escalated
    clock.now += 2 * HOUR
    assert [o.status for o in runner.sweeper.expire_overdue()] == ["expired"]
    waiting(runner, "t-cancel")
    runner.cancel("t-cancel", "customer withdrew")
    done = runner.start("Refund order A-1003: the pan cracked", thread_id="t-done")
    assert done.status == "done"
    monkeypatch.setenv("FAULTS", "tool.after-write=raise")
    failed = runner.start("Refund order A-1003: broken", thread_id="t-fail")
    assert failed.status == "failed"
    monkeypatch.delenv("FAULTS")
    return runner


def test_one_signed_notification_per_event_kind(store, clock, receiver, monkeypatch):
    from standardwebhooks.webhooks import Webhook

    monkeypatch.setenv("NOTIFY_URLS", receiver.url)
    monkeypatch.setenv("NOTIFY_SECRET", NOTIFY_SECRET)
    runner = every_kind(store, clock, monkeypatch)
    runner.sweeper.flush_outbox()
    kinds = [r.json["type"] for r in receiver.got]
    # the ladder, expiry, cancel and done/failed runs each notified exactly once
    assert sorted(kinds) == sorted([*ALL_KINDS, "approval.requested"])
    verifier = Webhook(NOTIFY_SECRET)
    for got in receiver.got:
        assert verifier.verify(got.body, got.headers) == got.json  # raises if the signature is bad
        assert got.headers["webhook-id"].startswith("ntf_")
    by_kind = {r.json["type"]: r.json["data"] for r in receiver.got}
    assert by_kind["run.failed"]["thread_id"] == "t-fail" and by_kind["run.failed"]["error"]
    assert by_kind["run.cancelled"]["reason"] == "customer withdrew"
    assert by_kind["approval.expired"]["thread_id"] == "t-ladder"
    runner.sweeper.flush_outbox()
    assert len(receiver.got) == len(kinds)  # nothing is sent twice


def test_slack_format_links_to_the_inbox_page(store, clock, receiver, monkeypatch):
    monkeypatch.setenv("NOTIFY_URLS", receiver.url)
    monkeypatch.setenv("NOTIFY_FORMAT", "slack")
    monkeypatch.setenv("PUBLIC_URL", "https://approvals.example.com/")
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-slack")
    runner.sweeper.flush_outbox()
    [got] = receiver.got
    assert list(got.json) == ["text"]
    link = f"<https://approvals.example.com/inbox/requests/{outcome.interrupt_id}|"
    assert (
        got.json["text"].startswith("Approval requested: run `t-slack`")
        and link in got.json["text"]
    )
    assert "webhook-signature" not in got.headers  # no NOTIFY_SECRET: unsigned


def test_a_receiver_down_then_up_gets_every_event_exactly_once(store, clock, monkeypatch):
    down = Receiver()  # its port is chosen but nothing listens yet
    other = Receiver().start()
    monkeypatch.setenv("NOTIFY_URLS", f"{down.url} {other.url}")
    monkeypatch.setenv("WEBHOOK_RETRY_BASE_SECONDS", "0")  # due again at once
    runner = every_kind(store, clock, monkeypatch)
    runner.sweeper.flush_outbox()
    assert len(other.got) == 8 and down.got == []
    down.start()
    try:
        runner.sweeper.flush_outbox()
        runner.sweeper.flush_outbox()
    finally:
        down.stop()
        other.stop()
    ids = [r.headers["webhook-id"] for r in down.got]
    assert len(ids) == 8 and len(set(ids)) == 8
    assert sorted(r.json["type"] for r in down.got) == sorted(r.json["type"] for r in other.got)
    assert {r.headers["webhook-id"] for r in other.got}.isdisjoint(ids)  # one id per receiver
