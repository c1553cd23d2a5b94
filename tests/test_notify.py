"""Lifecycle notifications: one per event kind, signed per Standard Webhooks, the Slack format,
and a receiver that was down gets every event exactly once (local receivers on 127.0.0.1)."""

from __future__ import annotations

import base64
from datetime import datetime

import pytest

from agent.ledger import Ledger
from inbox.outbox import FLUSHER, Outbox
from testkit.clock import HOUR, runner_at, waiting
from testkit.decide import answer
from testkit.receiver import Receiver
from testkit.wait import past, until

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
    Ledger(store.db).clear()  # t-done refunded A-1003 in full
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
    text = got.json["text"]
    # business words first (amount with currency, customer, order), then the run and the link
    assert text.startswith("Approval requested: Refund EUR 540.00 to Tom Berger"), text
    assert "order A-1004" in text and "(run `t-slack`)" in text and link in text
    assert "webhook-signature" not in got.headers  # no NOTIFY_SECRET: unsigned


def test_a_receiver_down_then_up_gets_every_event_exactly_once(store, clock, monkeypatch):
    down = Receiver()  # its port is chosen but nothing listens yet
    other = Receiver().start()
    monkeypatch.setenv("NOTIFY_URLS", f"{down.url} {other.url}")
    monkeypatch.setenv("WEBHOOK_RETRY_BASE_SECONDS", "0")  # due again at once
    # so every kick of the sender thread (one per transition) tries `down` again: on a loaded
    # machine the kicks don't coalesce and the oldest row used up the limit of 12 (the flake;
    # 9 attempts seen on an idle one)
    monkeypatch.setenv("WEBHOOK_MAX_ATTEMPTS", "1000")
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


def arrived(receiver: Receiver, n: int) -> list:
    """What the receiver got once it has ``n`` bodies (sent by the pausing process's sender
    thread, with no sweep)."""
    until(lambda: len(receiver.got) >= n, f"{n} notification(s) at the receiver")
    return receiver.got


def test_sent_at_once_without_a_sweep_and_complete(store, clock, receiver, monkeypatch):
    from standardwebhooks.webhooks import Webhook

    monkeypatch.setenv("NOTIFY_URLS", receiver.url)
    monkeypatch.setenv("NOTIFY_SECRET", NOTIFY_SECRET)
    monkeypatch.setenv("PUBLIC_URL", "https://approvals.example.com")
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-now")
    [got] = arrived(receiver, 1)  # no sweep, no flush: the process that paused sent it
    assert Webhook(NOTIFY_SECRET).verify(got.body, got.headers) == got.json
    event = got.json
    assert datetime.fromisoformat(event["timestamp"]).tzinfo is not None  # ISO 8601, not epoch
    data = event["data"]
    assert data["summary"].startswith("Refund EUR 540.00 to Tom Berger for order A-1004")
    assert data["views"][0]["currency"] == "EUR" and data["views"][0]["amount"] == "540.00"
    assert data["url"] == f"https://approvals.example.com/inbox/requests/{outcome.interrupt_id}"
    assert datetime.fromisoformat(data["expires_at"]).tzinfo is not None
    answer(runner, outcome.interrupt_id, [{"type": "reject", "message": "not our fault"}], "ann")
    runner.sweep()  # takes the handed-off rejection up; the run finishes
    done = arrived(receiver, 2)[1]
    assert Webhook(NOTIFY_SECRET).verify(done.body, done.headers) == done.json
    finished = done.json["data"]
    assert done.json["type"] == "run.done" and finished["outcome"] == "rejected"
    assert finished["reason"] == "not our fault"
    assert finished["decided_by"] == {"approvers": ["ann"], "source": "inbox"}
    assert finished["summary"].startswith("Refund EUR 540.00") and finished["url"]


def test_in_order_per_thread_after_a_receiver_outage(store, clock, monkeypatch):
    from standardwebhooks.webhooks import Webhook

    down = Receiver()  # nothing listens yet
    monkeypatch.setenv("NOTIFY_URLS", down.url)
    monkeypatch.setenv("NOTIFY_SECRET", NOTIFY_SECRET)
    monkeypatch.setenv("WEBHOOK_RETRY_BASE_SECONDS", "1")
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-order")  # approval.requested fails, retried in a second
    answer(runner, outcome.interrupt_id, [{"type": "approve"}], "ann")
    runner.sweep()  # run.done is owed now and due at once
    FLUSHER.wait()
    down.start()
    try:
        Outbox(store.tables).deliver_due()
        assert down.got == []  # run.done waits: the request before it is still owed
        due = store.db.one("SELECT max(next_attempt_at) AS at FROM webhook_outbox")["at"]
        past(due, "the failed request's retry, due a second after it failed")
        runner.sweeper.flush_outbox()
    finally:
        down.stop()
    assert [r.json["type"] for r in down.got] == ["approval.requested", "run.done"]
    for got in down.got:
        assert Webhook(NOTIFY_SECRET).verify(got.body, got.headers) == got.json
