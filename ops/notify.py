"""Lifecycle notifications for operators' alerting and chat, owed in the transition's own
transaction.

:func:`on_transition` is the hook ``RunStore`` calls inside every transition: for the events an
operator cares about it writes one outbox row per ``NOTIFY_URLS`` entry, so the notification
commits exactly when the transition does, and the outbox retries it with backoff until the
receiver answers 2xx (a receiver that is down loses nothing). Each row's id is derived from the
event, so it is stable across retries and a receiver can deduplicate on ``webhook-id``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from core import settings
from inbox.hitl import HitlRequest
from inbox.outbox import NOTIFICATION, Outbox
from ops import metrics
from store.db import Tx
from store.states import Event, Run

log = logging.getLogger("ops.transitions")

# audit event reason -> notification type
TYPES: dict[str, str] = {
    Event.PAUSED: "approval.requested",
    Event.REMINDER: "approval.reminder",
    Event.ESCALATED: "approval.escalated",
    Event.EXPIRED: "approval.expired",
    Event.FINISHED: "run.done",
    Event.FAILED: "run.failed",
    Event.CANCELLED: "run.cancelled",
}

SUMMARY = {
    "approval.requested": "Approval requested",
    "approval.reminder": "Reminder: approval still waiting",
    "approval.escalated": "Escalated: approval still waiting",
    "approval.expired": "Approval expired (rejected, nothing was done)",
    "run.done": "Run finished",
    "run.failed": "Run failed",
    "run.cancelled": "Run cancelled",
}


def urls() -> list[str]:
    raw = settings.NOTIFY_URLS.get() or ""
    return [u for u in raw.split() if u]


def inbox_link(interrupt_id: str | None) -> str | None:
    """The web inbox page of the request, when ``PUBLIC_URL`` says where the app is."""
    base = settings.PUBLIC_URL.get()
    if not base or not interrupt_id:
        return None
    return f"{base.rstrip('/')}/inbox/requests/{interrupt_id}"


def event_body(kind: str, run: Run, at: float, detail: Any) -> dict[str, Any]:
    """The ``standard`` body: ``{type, timestamp, data}`` as Standard Webhooks suggests."""
    data: dict[str, Any] = {
        "thread_id": run.thread_id,
        "workflow": run.workflow,
        "status": str(run.status),
        "interrupt_id": run.interrupt_id,
    }
    if kind.startswith("approval."):
        data["expires_at"] = run.expires_at
        data["url"] = inbox_link(run.interrupt_id)
        if run.request is not None:
            actions = HitlRequest.parse(run.request).actions
            data["actions"] = [a.name for a in actions]
            asked = [a.question for a in actions if a.question is not None]
            if asked:  # plain interrupts: what each asks and what answer it takes
                data["questions"] = [
                    {"node": q.where(), "text": q.text, "value": q.value, "expects": q.kind}
                    for q in asked
                ]
    if kind == "run.failed":
        data["error"] = run.error
    if kind == "run.cancelled" and isinstance(detail, dict):
        data["reason"] = detail.get("reason") or run.cancel_reason
    return {"type": kind, "timestamp": at, "data": data}


def slack_body(kind: str, run: Run) -> dict[str, str]:
    """A Slack incoming-webhook message: one line, linking the request's inbox page."""
    text = f"{SUMMARY[kind]}: run `{run.thread_id}` ({run.workflow})"
    link = inbox_link(run.interrupt_id) if kind.startswith("approval.") else None
    if kind.startswith("approval.") and run.request is not None:
        asked = [a.question for a in HitlRequest.parse(run.request).actions if a.question]
        if asked:
            text += ": " + "; ".join(q.describe()[:200] for q in asked[:3])
    if link:
        text += f" <{link}|open the request>"
    if kind == "run.failed" and run.error:
        text += f": {run.error[:200]}"
    return {"text": text}


def message_id(kind: str, run: Run, url: str) -> str:
    """Stable per event and receiver: the same transition always yields the same id."""
    key = f"{run.thread_id}|{kind}|{run.interrupt_id}|{run.updated_at!r}|{url}"
    return "ntf_" + hashlib.sha256(key.encode()).hexdigest()[:32]


def on_transition(tx: Tx, run: Run, reason: str, detail: Any) -> None:
    """The ``RunStore`` hook: count the transition; owe its notifications in ``tx``."""
    metrics.transition(str(reason))
    failed = str(run.status) == "failed"
    error = f": {run.error}" if failed and getattr(run, "error", None) else ""
    log.log(
        logging.WARNING if failed else logging.INFO,  # a failure is what an operator must see
        "run %s: %s (now %s)%s",
        run.thread_id,
        reason,
        run.status,
        error,
        extra={"thread_id": run.thread_id, "event": str(reason), "to_status": str(run.status)},
    )
    kind = TYPES.get(reason)
    targets = urls()
    if kind is None or not targets:
        return
    slack = settings.NOTIFY_FORMAT.get() == "slack"
    outbox = Outbox(None)  # type: ignore[arg-type]  # enqueue writes through tx only
    for url in targets:
        event = event_body(kind, run, run.updated_at, detail)
        body = slack_body(kind, run) if slack else event
        outbox.enqueue(
            tx,
            url,
            event,
            message_id=message_id(kind, run, url),
            event_type=NOTIFICATION + kind,
            body=json.dumps(body),
        )
