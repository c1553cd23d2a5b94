"""Where approval requests go and decisions come from.

The worker speaks one contract (:mod:`inbox.hitl`, LangChain's HITL middleware shape) and one
interface (:class:`inbox.base.Inbox`); ``INBOX`` picks the implementation. ``local`` (the default)
keeps requests in the worker's own database and is answered with ``python -m inbox``;
``vigilator`` sends them to Vigilator's API (``VIGILATOR_API_KEY``, ``VIGILATOR_BASE_URL``) and
its reviewers' decisions come back as signed webhooks or by polling.
"""

from __future__ import annotations

import os

from inbox.base import Approval, Inbox
from store.db import Database
from store.errors import UserError

INBOXES = ("local", "vigilator")


def app_name() -> str:
    """The prefix of every external id, ``<app>:<thread_id>``."""
    return os.environ.get("APP_NAME") or "approval-worker"


def external_id(thread_id: str) -> str:
    return f"{app_name()}:{thread_id}"


def thread_id_from(external: str) -> str | None:
    """The thread an external id routes to, or None if it belongs to another app."""
    prefix = app_name() + ":"
    return external[len(prefix) :] if external.startswith(prefix) else None


def open_inbox(db: Database) -> Inbox:
    """The inbox ``INBOX`` names; its settings are checked now, so a bad one stops start-up."""
    kind = os.environ.get("INBOX") or "local"
    if kind == "local":
        from inbox.local import LocalInbox

        return LocalInbox(db)
    if kind == "vigilator":
        from inbox.vigilator import VigilatorInbox

        return VigilatorInbox(db)
    raise UserError(f"INBOX={kind!r} is not supported; use one of: {', '.join(INBOXES)}")


__all__ = ["Approval", "Inbox", "external_id", "open_inbox", "thread_id_from"]
