"""Slack's tables: reviewer links (and the codes that prove one from its other side),
interactions already taken, and the message of each request.

Only rows; the Slack client lives in ``ops/slack.py`` and the route in ``api/slack.py``.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from store.db import Database

# a proven link is never replaced; one from before links were proven (no credential) may be
LINK = """
INSERT INTO slack_links (slack_user, reviewer, linked_at, credential, valid_until)
VALUES (:slack_user, :reviewer, :now, :credential, :valid_until)
ON CONFLICT (slack_user) DO UPDATE SET reviewer = :reviewer, linked_at = :now,
    credential = :credential, valid_until = :valid_until
WHERE slack_links.credential IS NULL
"""
LINK_OF = "SELECT * FROM slack_links WHERE slack_user = :slack_user"
UNLINK = "DELETE FROM slack_links WHERE slack_user = :slack_user AND reviewer = :reviewer"
START_CODE = """
INSERT INTO slack_link_codes (digest, slack_user, reviewer, credential, valid_until, started_by,
                              expires_at)
VALUES (:digest, :slack_user, :reviewer, :credential, :valid_until, :started_by, :expires_at)
"""
FORGET_CODES = "DELETE FROM slack_link_codes WHERE expires_at < :now"
PENDING_CODE = "SELECT * FROM slack_link_codes WHERE digest = :digest AND expires_at >= :now"
TAKE_CODE = "DELETE FROM slack_link_codes WHERE digest = :digest AND expires_at >= :now RETURNING *"
CODE_SECONDS = 600  # a started link waits this long for its other side
IS_SEEN = "SELECT 1 AS ok FROM slack_seen WHERE signature = :signature AND expires_at >= :now"
FORGET_SEEN = "DELETE FROM slack_seen WHERE expires_at < :now"
SEEN = """
INSERT INTO slack_seen (signature, expires_at) VALUES (:signature, :expires_at)
ON CONFLICT (signature) DO NOTHING
"""
REMEMBER_MESSAGE = """
INSERT INTO slack_messages (interrupt_id, thread_id, channel, ts)
VALUES (:interrupt_id, :thread_id, :channel, :ts)
ON CONFLICT (interrupt_id) DO NOTHING
"""
MESSAGE = "SELECT * FROM slack_messages WHERE interrupt_id = :interrupt_id"


@dataclass(frozen=True)
class Message:
    interrupt_id: str
    thread_id: str
    channel: str
    ts: str


@dataclass(frozen=True)
class Link:
    """A Slack user linked to a reviewer: who, and the product credential that vouched for the
    link (``key:<id>``, ``jwt``; None for a link made before links were proven), valid until
    ``valid_until`` when that credential ends by itself (a JWT)."""

    slack_user: str
    reviewer: str
    credential: str | None
    valid_until: float | None

    @property
    def proven(self) -> bool:
        return self.credential is not None


@dataclass(frozen=True)
class Started:
    """Half a link, waiting for its other side: from the product (``reviewer`` and their
    ``credential`` known, the Slack user claimed) or from Slack (the Slack user known)."""

    slack_user: str
    reviewer: str | None
    credential: str | None
    valid_until: float | None
    started_by: str  # "product" or "slack"


class LinkTaken(Exception):
    """A link could not be made: its code is gone, or the Slack user is linked already."""


def _digest(code: str) -> str:
    return hashlib.sha256(code.strip().encode()).hexdigest()


class SlackTables:
    def __init__(self, db: Database):
        self.db = db

    def link_of(self, slack_user: str) -> Link | None:
        row = self.db.one(LINK_OF, {"slack_user": slack_user})
        if row is None:
            return None
        return Link(row["slack_user"], row["reviewer"], row["credential"], row["valid_until"])

    def unlink(self, link: Link) -> bool:
        """End ``link`` (its reviewer asked); False if it changed meanwhile."""
        params = {"slack_user": link.slack_user, "reviewer": link.reviewer}
        return self.db.execute(UNLINK, params) == 1

    def start(self, half: Started, now: float) -> str:
        """Record half a link; the code that completes it from the other side (kept only as
        its digest, for ``CODE_SECONDS``)."""
        code = secrets.token_hex(5)
        row: dict[str, Any] = {**half.__dict__, "digest": _digest(code)}
        with self.db.transaction() as tx:
            tx.execute(FORGET_CODES, {"now": now})
            tx.execute(START_CODE, {**row, "expires_at": now + CODE_SECONDS})
        return code

    def pending(self, code: str, now: float) -> Started | None:
        """The half link ``code`` started, if it has not expired; nothing changes."""
        row = self.db.one(PENDING_CODE, {"digest": _digest(code), "now": now})
        if row is None:
            return None
        fields = ("slack_user", "reviewer", "credential", "valid_until", "started_by")
        return Started(**{f: row[f] for f in fields})

    def complete(self, code: str, link: Link, now: float) -> None:
        """Use up ``code`` and make the link, in one transaction: ``LinkTaken`` (nothing
        changed) if the code is gone or the Slack user was linked meanwhile."""
        with self.db.transaction() as tx:
            if tx.returning(TAKE_CODE, {"digest": _digest(code), "now": now}) is None:
                raise LinkTaken("the code was used or expired")
            if tx.execute(LINK, {**link.__dict__, "now": now}) != 1:
                raise LinkTaken(f"Slack user {link.slack_user} is linked already")

    def seen(self, signature: str, now: float) -> bool:
        return self.db.one(IS_SEEN, {"signature": signature, "now": now}) is not None

    def first_sight(self, signature: str, expires_at: float, now: float) -> bool:
        """True the first time a signed interaction is seen; False for a replay. Rows go once
        the signature's window is over: a replay after that fails the timestamp check."""
        with self.db.transaction() as tx:
            tx.execute(FORGET_SEEN, {"now": now})
            return tx.execute(SEEN, {"signature": signature, "expires_at": expires_at}) == 1

    def remember(self, message: Message) -> None:
        self.db.execute(REMEMBER_MESSAGE, message.__dict__)

    def message(self, interrupt_id: str) -> Message | None:
        row = self.db.one(MESSAGE, {"interrupt_id": interrupt_id})
        return None if row is None else Message(**row)
