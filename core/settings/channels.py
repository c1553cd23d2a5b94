"""The *Channels* settings: where reviewers decide besides the web inbox (Slack, e-mail).

Declared through :func:`core.settings._declare` like every other setting; each channel is off
until its settings are given, so a deployment that never configures Slack serves no Slack route.
"""

from __future__ import annotations

from email.utils import parseaddr

from core.settings import _declare
from core.settings.kinds import (
    Invalid,
    Setting,
    choice,
    http_url,
    integer,
    number,
    secret,
    text,
)

__all__ = [
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_CHANNEL",
    "SLACK_API_URL",
    "SLACK_ACK_SECONDS",
    "SMTP_HOST",
    "SMTP_PORT",
    "SMTP_TLS",
    "SMTP_USERNAME",
    "SMTP_PASSWORD",
    "EMAIL_FROM",
    "EMAIL_LINK_SECRET",
]

CHANNELS = "Channels"

SLACK_BOT_TOKEN: Setting[str | None] = _declare(
    "SLACK_BOT_TOKEN",
    secret,
    None,
    CHANNELS,
    "Slack bot token (`xoxb-...`) that posts approval requests; unset: Slack is off",
    example="xoxb-replace-me",
    sensitive=True,
)
SLACK_SIGNING_SECRET: Setting[str | None] = _declare(
    "SLACK_SIGNING_SECRET",
    secret,
    None,
    CHANNELS,
    "the Slack app's signing secret; `POST /slack/interactions` verifies every button with it",
    example="replace-with-the-app-signing-secret",
    sensitive=True,
)
SLACK_CHANNEL: Setting[str | None] = _declare(
    "SLACK_CHANNEL",
    text,
    None,
    CHANNELS,
    "Slack channel id that approval requests are posted to",
    example="C0123456789",
)
SLACK_API_URL: Setting[str] = _declare(
    "SLACK_API_URL",
    http_url,
    "https://slack.com/api/",
    CHANNELS,
    "base URL of the Slack Web API (tests point it at a local stand-in)",
)

SLACK_ACK_SECONDS: Setting[float] = _declare(
    "SLACK_ACK_SECONDS",
    number(0.0, 2.5),
    "0.3",
    CHANNELS,
    "longest a Slack button press waits for its decision before Slack gets its 200; a "
    "decision still waiting (a sweep holding SQLite's write lock) finishes after, and the "
    "presser reads its outcome in an ephemeral message (Slack allows 3 s)",
)


def slack_on() -> bool:
    """Slack posts and takes decisions only with a token, a signing secret and a channel."""
    return bool(SLACK_BOT_TOKEN.get() and SLACK_SIGNING_SECRET.get() and SLACK_CHANNEL.get())


MIN_LINK_SECRET = 32


def link_secret(raw: str) -> str:
    """The key that signs e-mail links: long enough that nobody guesses it."""
    value = secret(raw)
    if len(value) < MIN_LINK_SECRET:
        raise Invalid(
            f"must be at least {MIN_LINK_SECRET} characters (e.g. `openssl rand -hex 32`)"
        )
    return value


def sender(raw: str) -> str:
    """``approvals@example.com`` or ``Approvals <approvals@example.com>``, on one line."""
    value = raw.strip()
    address = parseaddr(value)[1]
    if any(ord(c) < 32 for c in value) or address.count("@") != 1 or address.startswith("@"):
        raise Invalid("must be an e-mail address, like Approvals <approvals@example.com>")
    return value


SMTP_HOST: Setting[str | None] = _declare(
    "SMTP_HOST",
    text,
    None,
    CHANNELS,
    "SMTP server that sends approval e-mails; unset: e-mail is off",
    example="smtp.example.com",
)
SMTP_PORT = _declare("SMTP_PORT", integer(1, 65535), "587", CHANNELS, "port of `SMTP_HOST`")
SMTP_TLS = _declare(
    "SMTP_TLS",
    choice("starttls", "ssl", "none"),
    "starttls",
    CHANNELS,
    "`starttls` (upgrade, usually port 587), `ssl` (TLS from the start, usually 465) or `none` "
    "(a relay on the same host only)",
)
SMTP_USERNAME: Setting[str | None] = _declare(
    "SMTP_USERNAME",
    text,
    None,
    CHANNELS,
    "SMTP login, if the server wants one",
    example="approvals@example.com",
)
SMTP_PASSWORD: Setting[str | None] = _declare(
    "SMTP_PASSWORD",
    secret,
    None,
    CHANNELS,
    "password of `SMTP_USERNAME` (never logged)",
    example="replace-me",
    sensitive=True,
)
EMAIL_FROM: Setting[str | None] = _declare(
    "EMAIL_FROM",
    sender,
    None,
    CHANNELS,
    "sender of approval e-mails",
    example="Approvals <approvals@example.com>",
)
EMAIL_LINK_SECRET: Setting[str | None] = _declare(
    "EMAIL_LINK_SECRET",
    link_secret,
    None,
    CHANNELS,
    "key (32+ characters) that signs the Approve / Reject links in e-mails",
    example="replace-with-openssl-rand-hex-32",
    sensitive=True,
)


def email_on() -> bool:
    """E-mail goes out, and its links are taken, only with a server, a sender, a link key and
    ``PUBLIC_URL`` (where the links point)."""
    from core.settings.operations import PUBLIC_URL

    parts = (SMTP_HOST.get(), EMAIL_FROM.get(), EMAIL_LINK_SECRET.get(), PUBLIC_URL.get())
    return all(parts)
