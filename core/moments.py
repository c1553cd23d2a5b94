"""Moments as a reviewer reads them: written out in a time zone with its name ("Mon 30 Nov
2026, 01:53 (Europe/Berlin)"), never a raw UTC stamp. Where the reader's own zone is unknown (an
e-mail, a refusal's words, a page before its script runs) that is ``DISPLAY_TIMEZONE``; Slack is
given its own date token, which each viewer's client writes in their own zone.

Machine-readable times (notification bodies, the API's fields, ``details``) stay ISO 8601 UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from core.money import DEFAULT_LOCALE

PATTERN = "EEE d MMM y, HH:mm"


def display_zone() -> str:
    from core.settings.operations import DISPLAY_TIMEZONE

    return DISPLAY_TIMEZONE.get()


def moment(at: float, locale: str = DEFAULT_LOCALE, zone: str | None = None) -> str:
    """``at`` (seconds since the epoch) in ``zone`` (the display zone by default), its name
    beside it so nobody guesses which zone a bare time is in."""
    from babel.dates import format_datetime

    name = zone or display_zone()
    when = datetime.fromtimestamp(at, UTC)
    text = format_datetime(when, PATTERN, tzinfo=ZoneInfo(name), locale=locale)
    return f"{text} ({name})"


def iso_utc(at: float) -> str:
    """The machine's form, for ``details`` and notification bodies: ``2026-11-30T00:53:20Z``."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def slack_moment(at: float) -> str:
    """Slack's date token: every viewer reads ``at`` in their own zone; clients that cannot
    render it show the display zone's words."""
    fallback = moment(at).replace("|", "/").replace(">", "")
    return f"<!date^{int(at)}^{{date_short_pretty}} at {{time}}|{fallback}>"
