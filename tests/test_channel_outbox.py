"""Slack posts and approval mail go through the outbox (issue 24, "nothing lost"): a Slack or
SMTP outage at the pause loses nothing, the sweep or ``python -m inbox deliver`` sends it once
the far end is back, a thread's Slack calls keep their order, and permanent refusals are given
up with their error kept. Real parts: ``slack_sdk`` against the local Slack Web API stand-in,
``smtplib`` against a local ``aiosmtpd`` server, on 127.0.0.1, both backends."""

from __future__ import annotations

import time

from conftest import run_cli

from inbox.outbox import FLUSHER, Outbox
from ops import mail
from store.keys import KeyStore, parse_roles
from testkit.clock import runner_at, waiting
from testkit.decide import answer
from testkit.mail import MailBox, links
from testkit.slack import SlackStandIn
from testkit.wait import past

TOKEN = "xoxb-outbox-test-token"
LINK_SECRET = "link-secret-for-outbox-tests-0123456789"
ADDRESS = {n: f"{n}@example.test" for n in ("bob", "carol")}


def rows(store, url_prefix: str) -> list[dict]:
    """The outbox rows of one channel, oldest first."""
    found = store.db.all(
        "SELECT url, event_type, attempts, last_error, delivered_at, next_attempt_at "
        "FROM webhook_outbox ORDER BY id"
    )
    return [r for r in found if r["url"].startswith(url_prefix)]


def with_slack(monkeypatch, stand_in: SlackStandIn) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "slack-signing-secret-for-outbox-tests")
    monkeypatch.setenv("SLACK_CHANNEL", "C0APPROVALS")
    monkeypatch.setenv("SLACK_API_URL", stand_in.url)
    monkeypatch.setenv("WEBHOOK_RETRY_BASE_SECONDS", "0")  # due again at once


def decided(runner, outcome, by: str = "ann") -> None:
    """Approve in the local inbox and let the sweep resume the run to its end."""
    answer(runner, outcome.interrupt_id, [{"type": "approve"}], by)
    runner.sweep()
    FLUSHER.wait()


def methods(stand_in: SlackStandIn) -> list[str]:
    return [method for method, _ in stand_in.calls]


# -- Slack ----------------------------------------------------------------------------------


def test_slack_down_at_the_pause_posts_once_then_updates_in_order(store, clock, monkeypatch):
    stand_in = SlackStandIn(TOKEN)  # its port is chosen but nothing listens yet
    with_slack(monkeypatch, stand_in)
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-slack-down")
    FLUSHER.wait()  # the process that paused tried at once
    [post] = rows(store, "slack:")
    assert post["delivered_at"] is None and post["attempts"] == 1
    assert "unreachable" in post["last_error"] and TOKEN not in post["last_error"]
    assert Outbox(store.tables).undelivered() == 1  # the backlog gauge counts it
    decided(runner, outcome)  # decided and done while Slack is down: two updates owed
    assert stand_in.calls == [] and Outbox(store.tables).undelivered() == 3
    stand_in.start()
    try:
        runner.sweeper.flush_outbox()
        runner.sweeper.flush_outbox()  # nothing left: nothing sent twice
    finally:
        stand_in.stop()
    assert methods(stand_in) == ["chat.postMessage", "chat.update", "chat.update"]
    [(ts, message)] = stand_in.messages.items()
    # the run is named only in its buttons' value, never in the text a reviewer reads
    assert '"t": "t-slack-down"' in str(stand_in.calls[0][1]["blocks"])
    assert all(body["ts"] == ts for _, body in stand_in.calls[1:])
    assert message["text"].startswith("*Approved* by ann")
    assert Outbox(store.tables).undelivered() == 0


def test_slack_500_and_ratelimited_are_retried_honouring_retry_after(store, clock, monkeypatch):
    stand_in = SlackStandIn(TOKEN, failing="500").start()
    try:
        with_slack(monkeypatch, stand_in)
        runner = runner_at(store, clock)
        waiting(runner, "t-slack-busy")
        FLUSHER.wait()
        assert [m for m, _ in stand_in.refused] == ["chat.postMessage"]
        assert stand_in.messages == {}
        stand_in.failing = "ratelimited"
        before = time.time()  # the outbox's clock, read before the attempt it dates
        runner.sweeper.flush_outbox()
        [post] = rows(store, "slack:")
        assert post["attempts"] == 2 and "ratelimited" in post["last_error"]
        assert post["next_attempt_at"] >= before + 1  # Retry-After: 1, not the 0 s base
        stand_in.failing = None
        runner.sweeper.flush_outbox()
        assert stand_in.messages == {}  # not before Slack said it may
        past(post["next_attempt_at"], "the Retry-After Slack asked for (the outbox's clock)")
        runner.sweeper.flush_outbox()
        runner.sweeper.flush_outbox()
        [post] = rows(store, "slack:")
        assert post["delivered_at"] is not None and post["last_error"] is None
        # posted, but its row owed again (a sender that died before settling it, its lease
        # over): the message remembered for the request is not posted a second time
        store.db.execute(
            "UPDATE webhook_outbox SET delivered_at = NULL, next_attempt_at = 0 "
            "WHERE url = 'slack:'"
        )
        runner.sweeper.flush_outbox()
    finally:
        stand_in.stop()
    assert methods(stand_in) == ["chat.postMessage"] and len(stand_in.messages) == 1
    assert rows(store, "slack:")[0]["delivered_at"] is not None


def test_a_permanent_slack_error_is_given_up_and_holds_nothing_back(store, clock, monkeypatch):
    monkeypatch.setenv("WEBHOOK_MAX_ATTEMPTS", "12")
    stand_in = SlackStandIn(TOKEN, failing="channel_not_found").start()
    try:
        with_slack(monkeypatch, stand_in)
        runner = runner_at(store, clock)
        outcome = waiting(runner, "t-slack-gone")
        FLUSHER.wait()
        [post] = rows(store, "slack:")
        assert post["attempts"] == 12 and "channel_not_found" in post["last_error"]
        assert post["delivered_at"] is None
        stand_in.failing = None
        decided(runner, outcome)
        runner.sweeper.flush_outbox()
    finally:
        stand_in.stop()
    assert len(stand_in.refused) == 1  # tried once, never again
    assert stand_in.calls == []  # no message, so nothing to update
    assert Outbox(store.tables).undelivered() == 0  # the updates settled, not stuck behind it


# -- e-mail ---------------------------------------------------------------------------------


def with_mail(monkeypatch, store, box: MailBox) -> dict[str, str]:
    monkeypatch.setenv("SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("SMTP_PORT", str(box.port))
    monkeypatch.setenv("SMTP_TLS", "none")
    monkeypatch.setenv("EMAIL_FROM", "Approvals <approvals@example.test>")
    monkeypatch.setenv("EMAIL_LINK_SECRET", LINK_SECRET)
    monkeypatch.setenv("PUBLIC_URL", "https://approvals.example.test")
    monkeypatch.setenv("WEBHOOK_RETRY_BASE_SECONDS", "0")
    keys = KeyStore(store.db)
    made = {n: keys.create(n, parse_roles(["reviewer"]), email=a)[0] for n, a in ADDRESS.items()}
    return {n: k.id for n, k in made.items()}


def test_smtp_down_then_up_each_reviewer_gets_exactly_one_mail(store, clock, monkeypatch):
    box = MailBox()  # nothing listens yet
    ids = with_mail(monkeypatch, store, box)
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-mail-down")
    mail.drain()
    owed = rows(store, "mail:")
    assert sorted(r["url"] for r in owed) == sorted(f"mail:{i}" for i in ids.values())
    assert all(r["attempts"] == 1 and "unreachable" in r["last_error"] for r in owed)
    assert all("token=" not in str(r) for r in owed)  # no link is stored, only sent
    box.start()
    try:
        first = run_cli("inbox", "deliver")  # a real process, as an operator runs it
        run_cli("inbox", "deliver")
        runner.sweeper.flush_outbox()
    finally:
        box.stop()
    assert first.stdout.count("delivered eml_") == 2, first.stdout
    for name, address in ADDRESS.items():
        [message] = box.to(address, "t-mail-down")
        token = links(message)["approve"].split("token=")[1]
        link = mail.read(token, clock.now)
        assert (link.reviewer, link.interrupt_id) == (name, outcome.interrupt_id)
    assert len(box.received) == 2 and Outbox(store.tables).undelivered() == 0


def test_a_request_decided_during_the_outage_is_not_mailed_after(store, clock, monkeypatch):
    box = MailBox()
    with_mail(monkeypatch, store, box)
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-mail-late")
    mail.drain()
    decided(runner, outcome)
    box.start()
    try:
        runner.sweeper.flush_outbox()
    finally:
        box.stop()
    assert box.received == []
    assert all(r["delivered_at"] is not None for r in rows(store, "mail:"))


def test_a_refused_recipient_is_given_up_and_the_others_mailed(store, clock, monkeypatch):
    box = MailBox(refuse={ADDRESS["carol"]}).start()
    try:
        ids = with_mail(monkeypatch, store, box)
        runner = runner_at(store, clock)
        waiting(runner, "t-mail-550")
        mail.drain()
        runner.sweeper.flush_outbox()
    finally:
        box.stop()
    assert [rcpt for rcpt, _ in box.received] == [[ADDRESS["bob"]]]
    [carol] = [r for r in rows(store, "mail:") if r["url"] == f"mail:{ids['carol']}"]
    assert carol["delivered_at"] is None and "550" in carol["last_error"]
    assert Outbox(store.tables).undelivered() == 0  # given up, not owed for ever
