"""Where approval requests go and decisions come from; the worker's only view of reviewers.

The worker speaks one contract (:mod:`core.hitl`, LangChain's HITL middleware shape) and one
interface (:class:`inbox.base.Inbox`); ``INBOX`` picks the implementation. ``local`` (the default)
keeps requests in the worker's own database and is answered with ``python -m inbox``;
``vigilator`` sends them to Vigilator's API (``VIGILATOR_API_KEY``, ``VIGILATOR_BASE_URL``) and
its reviewers' decisions come back as signed webhooks or by polling.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from core import settings
from inbox.base import Approval, Inbox, Rules

if TYPE_CHECKING:
    from store.tables import Tables


def app_name() -> str:
    """The prefix of every external id, ``<app>:<thread_id>``."""
    return settings.APP_NAME.get()


def external_id(thread_id: str) -> str:
    return f"{app_name()}:{thread_id}"


def thread_id_from(external: str) -> str | None:
    """The thread an external id routes to, or None if it belongs to another app."""
    prefix = app_name() + ":"
    return external[len(prefix) :] if external.startswith(prefix) else None


def open_inbox(tables: Tables, clock: Callable[[], float] = time.time) -> Inbox:
    """The inbox ``INBOX`` names; its settings are checked now, so a bad one stops start-up."""
    if settings.INBOX.get() == "vigilator":
        from inbox.vigilator import VigilatorInbox

        return VigilatorInbox(tables, clock=clock)
    from inbox.local import LocalInbox

    return LocalInbox(tables, clock)


__all__ = ["Approval", "Inbox", "Rules", "external_id", "open_inbox", "thread_id_from"]
