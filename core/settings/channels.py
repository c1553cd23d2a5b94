"""The *Channels* settings: where reviewers decide besides the web inbox (Slack today).

Declared through :func:`core.settings._declare` like every other setting; each channel is off
until its settings are given, so a deployment that never configures Slack serves no Slack route.
"""

from __future__ import annotations

from core.settings import _declare
from core.settings.kinds import Setting, http_url, secret, text

__all__ = ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_CHANNEL", "SLACK_API_URL"]

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


def slack_on() -> bool:
    """Slack posts and takes decisions only with a token, a signing secret and a channel."""
    return bool(SLACK_BOT_TOKEN.get() and SLACK_SIGNING_SECRET.get() and SLACK_CHANNEL.get())
