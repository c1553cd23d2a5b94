"""Lifecycle notifications for operators' alerting and chat, owed in the transition's own
transaction and sent right after it commits.

:class:`Notifier` is the hook ``RunStore`` calls: inside every transition, for the events an
operator cares about, it writes one outbox row per ``NOTIFY_URLS`` entry, so the notification
commits exactly when the transition does; once the transition has committed it wakes this
process's sender (``inbox.outbox.FLUSHER``), so the event goes out at once. The outbox retries
with backoff until the receiver answers 2xx (a receiver that is down loses nothing), one thread's
events in order. Each row's id is derived from the event, so it is stable across retries and a
receiver can deduplicate on ``webhook-id``.

Every event says what is at stake in business terms (the workflow's ``describe``, or the generic
view), how a finished run ended and why, who decided, when (ISO 8601), and where to open it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from core import settings
from inbox.outbox import FLUSHER, NOTIFICATION, WEBHOOK, enqueue
from inbox.views import ActionView
from ops import metrics
from ops.mail import Amount, Mail
from ops.shown import Shown, Views, views_of
from ops.slack import Slack, inert
from store.db import Tx
from store.states import Event, Run
from store.tables import Tables

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


def iso(at: float) -> str:
    """ISO 8601 in UTC, as Standard Webhooks' ``timestamp`` is written."""
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def view_json(view: ActionView) -> dict[str, Any]:
    return {
        "summary": view.summary,
        "amount": str(view.amount) if view.amount is not None else None,
        "currency": view.currency,
        "amount_text": view.amount_text or None,
        "fields": [{"label": f.label, "text": f.text} for f in (*view.fields, *view.context)],
    }


def outcome_of(kind: str, run: Run, detail: Any, claim: dict[str, Any] | None) -> dict[str, Any]:
    """How a finished run ended and why, in words a receiver can show as they are."""
    if kind == "approval.expired":
        return {"outcome": "expired", "reason": "no decision before the deadline; nothing done"}
    if kind == "run.failed":
        return {"outcome": "failed", "reason": (run.error or "")[:500]}
    if kind == "run.cancelled":
        reason = detail.get("reason") if isinstance(detail, dict) else None
        return {"outcome": "cancelled", "reason": reason or run.cancel_reason}
    decided = (claim or {}).get("decision") or {}
    raw = decided.get("decisions") if isinstance(decided, dict) else None
    types = [d.get("type") for d in raw or [] if isinstance(d, dict)]
    messages = [str(d["message"]) for d in raw or [] if isinstance(d, dict) and d.get("message")]
    if not types:
        outcome = "completed"
    elif all(t == "reject" for t in types):
        outcome = "rejected"
    elif "edit" in types:
        outcome = "approved with edits"
    elif all(t == "approve" for t in types):
        outcome = "approved"
    else:
        outcome = "answered"
    return {
        "outcome": outcome,
        "reason": "; ".join(messages)[:500] or None,
        "result": (run.result or "")[:500] or None,
    }


def decided_by(claim: dict[str, Any] | None) -> dict[str, Any] | None:
    if not claim:
        return None
    return {"approvers": list(claim.get("approvers") or []), "source": claim.get("source") or None}


def event_body(
    kind: str,
    run: Run,
    at: float,
    detail: Any,
    *,
    views: Sequence[ActionView] | None = None,
    claim: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``standard`` body: ``{type, timestamp, data}`` as Standard Webhooks suggests."""
    shown = list(views) if views is not None else views_of(run, None)
    data: dict[str, Any] = {
        "thread_id": run.thread_id,
        "workflow": run.workflow,
        "status": str(run.status),
        "interrupt_id": run.interrupt_id,
        "summary": "; ".join(v.summary for v in shown) or None,
        "url": inbox_link(run.interrupt_id),
        "requested_by": run.requested_by,
    }
    if kind.startswith("approval."):
        data["expires_at"] = iso(run.expires_at) if run.expires_at else None
        if run.approver_groups is not None:  # the authority matrix: who may approve it
            data["approver_groups"] = list(run.approver_groups)
        if run.request is not None:
            actions = run.asked.actions
            data["actions"] = [a.name for a in actions]
            asked = [a.question for a in actions if a.question is not None]
            if asked:  # plain interrupts: what each asks and what answer it takes
                data["questions"] = [
                    {"node": q.where(), "text": q.text, "value": q.value, "expects": q.kind}
                    for q in asked
                ]
    data["views"] = [view_json(v) for v in shown]
    if kind == "run.failed":
        data["error"] = run.error
    if kind in ("approval.expired", "run.done", "run.failed", "run.cancelled"):
        data.update(outcome_of(kind, run, detail, claim))
        data["decided_by"] = decided_by(claim) if kind == "run.done" else None
    return {"type": kind, "timestamp": iso(at), "data": data}


def slack_body(
    kind: str, run: Run, views: Sequence[ActionView] | None = None, event: dict | None = None
) -> dict[str, str]:
    """A Slack incoming-webhook message: one line in business terms, linking the request."""
    shown = list(views) if views is not None else views_of(run, None)
    text = f"{SUMMARY[kind]}: " + inert("; ".join(v.summary for v in shown)[:300] or run.workflow)
    text += f" (run `{run.thread_id}`)"
    data = (event or {}).get("data") or {}
    if data.get("outcome"):
        text += f": {data['outcome']}"
        if data.get("reason"):
            text += f" ({inert(str(data['reason'])[:200])})"
    who = (data.get("decided_by") or {}).get("approvers")
    if who:
        text += " by " + inert(", ".join(who))
    if kind.startswith("approval.") and run.request is not None:
        asked = [a.question for a in run.asked.actions if a.question]
        if asked:
            text += ": " + inert("; ".join(q.describe()[:200] for q in asked[:3]))
    link = inbox_link(run.interrupt_id)
    if link:
        text += f" <{link}|open the request>"
    return {"text": text}


def owe_halt(tx: Tx, kind: str, detail: dict[str, Any]) -> bool:
    """``halt.on`` / ``halt.off`` to every ``NOTIFY_URLS`` entry, owed in the halt's own
    transaction: who, why, what, and how many stopped runs were handed back. Whether any was
    owed (then kick the sender after the commit)."""
    targets = urls()
    if not targets:
        return False
    at = float(detail["at"])
    data = {k: detail.get(k) for k in ("scope", "reason", "by", "released")}
    event = {"type": kind, "timestamp": iso(at), "data": data}
    what = "Halted" if kind == "halt.on" else "Halt lifted"
    text = f"{what}: {data['scope']} by {data['by']} ({str(data['reason'])[:200]})"
    slack = settings.NOTIFY_FORMAT.get() == "slack"
    body = json.dumps({"text": text} if slack else event)
    for url in targets:
        key = f"{kind}|{data['scope']}|{at!r}|{url}"
        enqueue(
            tx,
            url,
            event,
            message_id="ntf_" + hashlib.sha256(key.encode()).hexdigest()[:32],
            event_type=NOTIFICATION + kind,
            body=body,
            thread_key="audit:halts",
        )
    return True


def message_id(kind: str, run: Run, url: str) -> str:
    """Stable per event and receiver: the same transition always yields the same id."""
    key = f"{run.thread_id}|{kind}|{run.interrupt_id}|{run.updated_at!r}|{url}"
    return "ntf_" + hashlib.sha256(key.encode()).hexdigest()[:32]


class Notifier:
    """The ``RunStore`` hooks: owe a transition's notifications in its transaction, then send
    them once it has committed."""

    def __init__(
        self, tables: Tables, views: Views | None = None, amount: Amount | None = None
    ) -> None:
        self.tables = tables
        self.views = views
        self.slack = Slack(tables, views)
        self.mail = Mail(amount)

    def on_transition(
        self, tx: Tx, run: Run, reason: str, detail: Any, at: float | None = None
    ) -> None:
        """Owe the transition's notifications in ``tx`` (its count and log line wait for the
        commit: nothing but rows is done while the transaction holds the run's row). ``at``:
        when the transition happened, the event's ``timestamp`` (a reminder or an escalation
        leaves the run's ``updated_at`` at the pause, so that is not it)."""
        shown = Shown(tx, run, self.views)  # read once, whichever channels show it
        self.slack.owe(tx, run, reason, shown)  # Slack and e-mail rows: the same outbox
        self.mail.owe(tx, run, reason, shown)
        kind = TYPES.get(reason)
        targets = urls()
        if kind is None or not targets:
            return
        claim = shown.claim if kind == "run.done" else None
        when = run.updated_at if at is None else at
        event = event_body(kind, run, when, detail, views=shown.views, claim=claim)
        slack = settings.NOTIFY_FORMAT.get() == "slack"
        body = json.dumps(slack_body(kind, run, shown.views, event) if slack else event)
        for url in targets:
            enqueue(
                tx,
                url,
                event,
                message_id=message_id(kind, run, url),
                event_type=NOTIFICATION + kind,
                body=body,
                thread_key=run.thread_id,
            )

    def committed(self, run: Run, reason: str) -> None:
        """After the commit: count and log the transition, send what it owed now."""
        metrics.transition(str(reason))
        failed = str(run.status) == "failed"
        error = f": {run.error}" if failed and run.error else ""
        log.log(
            logging.WARNING if failed else logging.INFO,  # a failure is what an operator must see
            "run %s: %s (now %s)%s",
            run.thread_id,
            reason,
            run.status,
            error,
            extra={
                "thread_id": run.thread_id,
                "event": str(reason),
                "to_status": str(run.status),
            },
        )
        lanes = [WEBHOOK] if reason in TYPES and urls() else []
        lanes += ["slack"] if self.slack.owes(run, reason) else []
        lanes += ["mail"] if self.mail.owes(run, reason) else []
        if lanes:  # each channel's own sender: a slow mail server holds back no webhook
            FLUSHER.kick(self.tables, lanes)
