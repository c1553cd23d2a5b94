"""Slack's tables: reviewer links, interactions already taken, and the message of each request.

Only rows; the Slack client lives in ``ops/slack.py`` and the route in ``api/slack.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from store.db import Database

LINK = """
INSERT INTO slack_links (slack_user, reviewer, linked_at) VALUES (:slack_user, :reviewer, :now)
ON CONFLICT (slack_user) DO UPDATE SET reviewer = :reviewer, linked_at = :now
"""
REVIEWER = "SELECT reviewer FROM slack_links WHERE slack_user = :slack_user"
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


class SlackTables:
    def __init__(self, db: Database):
        self.db = db

    def link(self, slack_user: str, reviewer: str, now: float) -> None:
        """The reviewer (as their credential names them) says this Slack user is them."""
        self.db.execute(LINK, {"slack_user": slack_user, "reviewer": reviewer, "now": now})

    def reviewer(self, slack_user: str) -> str | None:
        row = self.db.one(REVIEWER, {"slack_user": slack_user})
        return None if row is None else str(row["reviewer"])

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
