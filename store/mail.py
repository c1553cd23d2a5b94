"""E-mail's one table: each reviewer's use of a request's signed links.

A row is the first use of a link by a reviewer on a request, taken with insert-if-absent on
(request, reviewer), so of two uses at once exactly one gets the row and goes on to decide. A use
the decision path then refuses gives its row back (:meth:`EmailLinks.give_back`), so a refusal
leaves the table as it was. Only rows; the tokens and the mail live in ``ops/mail.py``, the
route in ``api/mail.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from store.db import Database

TAKE = """
INSERT INTO email_links_used (interrupt_id, reviewer, thread_id, action, used_at, expires_at)
VALUES (:interrupt_id, :reviewer, :thread_id, :action, :used_at, :expires_at)
ON CONFLICT (interrupt_id, reviewer) DO NOTHING
"""
GIVE_BACK = """
DELETE FROM email_links_used
WHERE interrupt_id = :interrupt_id AND reviewer = :reviewer AND used_at = :used_at
"""
USED = """
SELECT * FROM email_links_used WHERE interrupt_id = :interrupt_id AND reviewer = :reviewer
"""
FORGET = "DELETE FROM email_links_used WHERE expires_at < :now"


@dataclass(frozen=True)
class Use:
    interrupt_id: str
    reviewer: str  # its identity key (``core.identity.identity_key``): one person, however spelled
    thread_id: str
    action: str
    used_at: float
    expires_at: float


class EmailLinks:
    def __init__(self, db: Database):
        self.db = db

    def take(self, use: Use) -> bool:
        """True for the first use of this reviewer's links on this request; False after."""
        return self.db.execute(TAKE, use.__dict__) == 1

    def give_back(self, use: Use) -> None:
        """Undo :meth:`take` (the decision was refused: the link was not spent)."""
        keys = ("interrupt_id", "reviewer", "used_at")
        self.db.execute(GIVE_BACK, {k: use.__dict__[k] for k in keys})

    def used(self, interrupt_id: str, reviewer: str) -> Use | None:
        row = self.db.one(USED, {"interrupt_id": interrupt_id, "reviewer": reviewer})
        return None if row is None else Use(**row)

    def forget_expired(self, now: float) -> int:
        """Rows whose links have expired anyway (an expired link is refused by its token)."""
        return self.db.execute(FORGET, {"now": now})
