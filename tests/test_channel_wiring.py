"""The channels' senders are built where the process is built (``ops.channels.senders``, handed
to the runner by ``open_runner`` and the app), never registered at import. A fresh interpreter
that only builds its runner the normal way sends both a Slack post and an approval mail, without
importing ``ops.slack`` or ``ops.mail`` itself; one that imports every channel module but is
built with no senders sends neither. Real parts: ``slack_sdk`` against the local Slack stand-in,
``smtplib`` against a local ``aiosmtpd`` server, on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from store.keys import KeyStore, parse_roles
from testkit.mail import MailBox
from testkit.slack import SlackStandIn

TOKEN = "xoxb-wiring-test-token"
ADDRESS = "bob@example.test"
ROOT = Path(__file__).resolve().parent.parent

# the normal way: the runner the CLI, recover.py and the serverless handler build
BUILT = """
    from worker.runner import open_runner

    with open_runner() as runner:
        runner.start("Refund order A-1004: desk wobbles", thread_id="t-wired")
        runner.sweeper.flush_outbox()  # whatever the sending threads left, sent now
"""

# every channel module imported, no senders built: nothing can have registered itself
IMPORTED_ONLY = """
    import ops.mail, ops.metrics, ops.slack, ops.smtp  # noqa: F401, E401
    from inbox.outbox import FLUSHER, WEBHOOKS_ONLY, Outbox
    from store.db import open_store

    assert FLUSHER.senders == WEBHOOKS_ONLY
    with open_store() as store:
        assert Outbox(store.tables).senders == WEBHOOKS_ONLY
        Outbox(store.tables).deliver_due()
"""


def _run(script: str) -> None:
    """``script`` in a fresh interpreter, with this test's settings (its database included)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture
def channels(store, monkeypatch):
    """Slack and mail configured against local stand-ins, one reviewer with an address."""
    slack, box = SlackStandIn(TOKEN).start(), MailBox().start()
    for name, value in {
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": "slack-signing-secret-for-wiring-tests",
        "SLACK_CHANNEL": "C0APPROVALS",
        "SLACK_API_URL": slack.url,
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(box.port),
        "SMTP_TLS": "none",
        "EMAIL_FROM": "Approvals <approvals@example.test>",
        "EMAIL_LINK_SECRET": "link-secret-for-wiring-tests-0123456789",
        "PUBLIC_URL": "https://approvals.example.test",
    }.items():
        monkeypatch.setenv(name, value)
    KeyStore(store.db).create("bob", parse_roles(["reviewer"]), email=ADDRESS)
    try:
        yield slack, box
    finally:
        slack.stop()
        box.stop()


def owed(store, prefix: str) -> list[dict]:
    rows = store.db.all("SELECT url, attempts, delivered_at FROM webhook_outbox ORDER BY id")
    return [r for r in rows if r["url"].startswith(prefix)]


def test_a_runner_built_the_normal_way_sends_slack_and_mail(store, channels):
    slack, box = channels
    _run(BUILT)
    assert [method for method, _ in slack.calls] == ["chat.postMessage"]
    assert [to for to, _ in box.received] == [[ADDRESS]]
    assert all(r["delivered_at"] is not None for r in owed(store, "slack:") + owed(store, "mail:"))


def test_importing_the_channels_registers_no_sender(store, channels):
    slack, box = channels
    _run(BUILT)  # the rows a pause owes, sent; owed again below
    with store.db.transaction() as tx:
        tx.execute("UPDATE webhook_outbox SET delivered_at = NULL, attempts = 0")
    before = owed(store, "slack:") + owed(store, "mail:")
    sent = len(slack.calls), len(box.received)
    _run(IMPORTED_ONLY)
    assert (len(slack.calls), len(box.received)) == sent  # this process sent none
    assert owed(store, "slack:") + owed(store, "mail:") == before and len(before) == 2
