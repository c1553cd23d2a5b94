"""Approval requests as Slack messages with buttons, kept up to date in place.

A paused run is posted to ``SLACK_CHANNEL`` through the Slack Web API (``chat.postMessage``) as
Block Kit: the business summary, its fields, the deadline, the quorum and Approve / Reject
buttons whose value names the request and the digest of what the message shows, so a press
decides exactly that request (``api/slack.py`` takes it through the one decision path). Once
the request is decided, expires, is cancelled or the run ends, the message is replaced
(``chat.update``) with the outcome and who decided, wherever the decision was made.

Each post and update is an outbox row (``url`` ``slack:``) committed in the transition's own
transaction, so a Slack outage loses nothing: the process that committed sends it right after
(``inbox.outbox.FLUSHER``), and the sweep or ``python -m inbox deliver`` retries it with the
webhooks' backoff. One thread's rows go out in order, so an update never runs before its post.
``ratelimited``, 5xx and connection failures are retried; any other Slack error (a channel that
does not exist, a revoked token) is permanent: the row is given up with the error kept. A post
already remembered in ``slack_messages`` is not posted again; a post whose answer was lost on
the way back may be (Slack has no idempotency key). Off until ``SLACK_BOT_TOKEN``,
``SLACK_SIGNING_SECRET`` and ``SLACK_CHANNEL`` are set.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core import settings
from core.authority import needs_phrase
from core.moments import slack_moment
from core.settings.channels import slack_on
from inbox.outbox import FLUSHER, NOTIFICATION, Sent, enqueue
from inbox.views import ActionView
from ops.shown import Shown, Views, views_of
from store.db import Tx
from store.outbox import OutboxRow
from store.slack import Message
from store.states import Event, Run, Status
from store.tables import Tables

log = logging.getLogger("ops.slack")

ENDED: dict[str, str] = {
    Event.CLAIMED: "decided",
    Event.FINISHED: "done",
    Event.EXPIRED: "expired",
    Event.CANCELLED: "cancelled",
    Event.FAILED: "failed",
}
TARGET = "slack:"  # the outbox rows' ``url``
SEND_TIMEOUT = 10.0
# Slack's answers worth another try; any other error is the request's or the set-up's
TRANSIENT = {"ratelimited", "internal_error", "fatal_error", "service_unavailable",
             "request_timeout"}  # fmt: skip


def button_value(run: Run, proposal: str | None = None) -> str:
    """What a button carries back: the request and the digest of what the message shows, and
    the fingerprint of the quorum's standing proposal when it shows one."""
    value = {"t": run.thread_id, "i": run.interrupt_id, "d": run.request_digest}
    return json.dumps(value | ({"p": proposal} if proposal else {}))


def inert(text: object) -> str:
    """Requester-supplied text as Slack shows it and never acts on it: ``&``, ``<`` and ``>``
    escaped, so ``<!channel>`` or a disguised ``<https://…|Open in inbox>`` link is plain text."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def request_blocks(
    run: Run,
    views: Sequence[ActionView],
    progress: str = "",
    needs: str | None = None,
    proposal: str | None = None,
    changes: Sequence[str] = (),
) -> list[dict]:
    """The request's message: what it proposes (a quorum's standing proposal once a reviewer
    changed it: ``views`` of it, its ``changes`` in words, the approvals it ``needs`` now, and
    the ``proposal``'s fingerprint on the buttons so a press approves exactly that)."""
    from ops.notify import inbox_link

    summary = inert("; ".join(v.summary for v in views) or run.workflow)
    fields = [
        {"type": "mrkdwn", "text": f"*{inert(f.label)}*\n{inert(f.text)}"[:1900]}
        for v in views
        for f in (*v.fields, *v.context)
    ][:10]
    warnings = [inert(v.warning) for v in views if v.warning]
    facts = []
    if run.expires_at:  # Slack writes it in each viewer's own zone
        facts.append(f"decide by {slack_moment(run.expires_at)}")
    if needs is None:
        needs = needs_phrase(run.approver_groups or (), run.quorum or 1)  # as approval.needs
    if needs:
        facts.append(f"needs {needs}")
    if run.requested_by:
        facts.append(f"requested by {inert(run.requested_by)}")
    if progress:
        facts.append(progress)
    buttons: list[dict[str, Any]] = [
        {
            "type": "button",
            "action_id": "approve",
            "style": "primary",
            "text": {"type": "plain_text", "text": "Approve"},
            "value": button_value(run, proposal),
        },
        {
            "type": "button",
            "action_id": "reject",
            "style": "danger",
            "text": {"type": "plain_text", "text": "Reject"},
            "value": button_value(run, proposal),
        },
    ]
    link = inbox_link(run.interrupt_id)
    if link:
        buttons.append(
            {"type": "button", "action_id": "open", "url": link,
             "text": {"type": "plain_text", "text": "Open"}}
        )  # fmt: skip
    heading = f"*Approval requested*: {summary}"[:2900]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": heading}}
    ]
    if changes:
        text = f"*Changed:* {inert('; '.join(changes))}"[:2900]
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    if warnings:
        text = f":warning: *Check first:* {' '.join(warnings)}"[:2900]
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    if fields:
        blocks.append({"type": "section", "fields": fields})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(facts)}]})
    blocks.append({"type": "actions", "block_id": "decide", "elements": buttons})
    return blocks


class Slack:
    """Owes each request's post once, and the updates of its message as the run moves on."""

    def __init__(self, tables: Tables, views: Views | None = None) -> None:
        self.tables = tables
        self.views = views

    @staticmethod
    def owes(run: Run, reason: str) -> bool:
        """Whether this transition owes Slack a post or an update (cheap: no reads)."""
        wanted = reason == Event.PAUSED or reason in ENDED
        return wanted and bool(run.interrupt_id) and slack_on()

    def owe(self, tx: Tx, run: Run, reason: str, shown: Shown) -> bool:
        """In the transition's transaction: owe a new request's post, or the update that shows
        how it ended. False when there is nothing to owe; a message that cannot be composed is
        logged and left out (Slack must not stop a run)."""
        if not self.owes(run, reason):
            return False
        try:
            views = shown.views
            if reason == Event.PAUSED:
                if any(a.question for a in run.asked.actions):
                    return False  # plain questions take typed answers: the page, not buttons
                op = "post"
                text = "Approval requested: " + inert(
                    "; ".join(v.summary for v in views) or run.workflow
                )
                blocks = request_blocks(run, views)
            else:
                op = "update"
                text = outcome_line(run, reason, views, shown.claim)
                blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}}]
        except Exception as exc:  # noqa: BLE001
            log.warning("slack: run %s not shown (%s)", run.thread_id, type(exc).__name__)
            return False
        self._owe(tx, run, op, text[:3000], blocks, f"{reason}|{run.updated_at!r}")
        return True

    def progress(
        self,
        run: Run,
        approvers: Sequence[str],
        quorum: int,
        standing: Standing | None = None,
    ) -> None:
        """A quorum still short: owe the update that keeps the buttons, with who approved so
        far and, once a reviewer changed it, the ``standing`` proposal (its values, what
        changed, the approvals it now needs), in its own transaction (the approval is already
        recorded), and send it now."""
        if not run.interrupt_id or not slack_on():
            return
        text = inert(f"{len(approvers)} of {quorum} approvals: {', '.join(approvers)}")
        if standing is None:
            blocks = request_blocks(run, self._views(run), progress=text)
        else:
            blocks = request_blocks(
                run,
                standing.views,
                text,
                standing.needs,
                standing.fingerprint,
                [f"{label} {old} → {new}" for label, old, new in standing.changes],
            )
        # keyed by time too: the same approvers again (after a counter-proposal) show again
        mark = f"{'|'.join(approvers)}|{time.time()!r}"
        self.tables.outbox().together(lambda tx: self._owe(tx, run, "progress", text, blocks, mark))
        FLUSHER.kick(self.tables)

    def _owe(self, tx: Tx, run: Run, op: str, text: str, blocks: list[dict], key: str) -> None:
        assert run.interrupt_id is not None
        body = {"op": op, "thread_id": run.thread_id, "interrupt_id": run.interrupt_id,
                "text": text, "blocks": blocks}  # fmt: skip
        mark = f"{run.interrupt_id}|{op}|{key}"
        enqueue(
            tx,
            TARGET,
            {},
            message_id="slk_" + hashlib.sha256(mark.encode()).hexdigest()[:32],
            event_type=f"{NOTIFICATION}slack.{op}",
            body=json.dumps(body),
            thread_key=run.thread_id,
        )

    def _views(self, run: Run) -> list[ActionView]:
        return views_of(run, self.views)


@dataclass(frozen=True)
class Standing:
    """A quorum's standing proposal as a reviewer changed it, for the reviewers still to
    approve: its actions in business terms, what changed (label, old, new), whom it now needs
    and the fingerprint that approves exactly it."""

    by: str
    views: Sequence[ActionView]
    changes: Sequence[tuple[str, str, str]]
    needs: str
    fingerprint: str
    request: Any = None  # the request as the proposal would run it (HITL JSON)


def outcome_line(run: Run, reason: str, views: Sequence[ActionView], claim: Any) -> str:
    """What the message says once the request is decided or the run has ended."""
    from ops.notify import outcome_of

    summary = inert("; ".join(v.summary for v in views) or run.workflow)
    who = inert(", ".join((claim or {}).get("approvers") or []))
    if reason == Event.CLAIMED:
        kinds = {str(d.get("type")) for d in (run.decision or {}).get("decisions") or [] if d}
        word = "Rejected" if kinds == {"reject"} else "Approved"
        return f"*{word}* by {who}: {summary}"
    kind = {"done": "run.done", "expired": "approval.expired"}.get(
        ENDED[reason], f"run.{ENDED[reason]}"
    )
    ended = outcome_of(kind, run, None, claim)
    line = f"*{str(ended['outcome']).capitalize()}*" + (
        f" by {who}" if who and kind == "run.done" else ""
    )
    line += f": {summary}"
    if ended.get("reason"):
        line += f" ({inert(ended['reason'])})"
    return line


def client() -> Any:
    from slack_sdk import WebClient

    # no retries of its own (the outbox retries) and a timeout inside the row's lease
    return WebClient(
        token=settings.SLACK_BOT_TOKEN.get(),
        base_url=settings.SLACK_API_URL.get(),
        timeout=int(SEND_TIMEOUT),
        retry_handlers=[],
    )


def deliver(tables: Tables, row: OutboxRow) -> Sent:
    """Send one owed row: post (unless already posted), or update the request's message."""
    from slack_sdk.errors import SlackApiError

    if not slack_on():
        return Sent(False, "Slack is not configured", final=True)
    owed = json.loads(row.payload)
    messages = tables.slack()
    message = messages.message(owed["interrupt_id"])
    try:
        if owed["op"] == "post":
            if message is not None:
                return Sent(True, "already posted")
            sent = client().chat_postMessage(
                channel=str(settings.SLACK_CHANNEL.get()), text=owed["text"], blocks=owed["blocks"]
            )
            messages.remember(
                Message(owed["interrupt_id"], owed["thread_id"], str(sent["channel"]),
                        str(sent["ts"]))
            )  # fmt: skip
            return Sent(True, "posted")
        if message is None:
            return Sent(True, "no message to update")  # a question, or its post given up
        if owed["op"] == "progress" and not _still_waiting(tables, owed):
            return Sent(True, "decided since: progress not shown")
        client().chat_update(
            channel=message.channel, ts=message.ts, text=owed["text"], blocks=owed["blocks"]
        )
        return Sent(True, "updated")
    except SlackApiError as exc:
        return refused(exc)
    except Exception as exc:  # noqa: BLE001 - connection refused, timeout: retried
        log.warning("slack: run %s not sent (%s)", owed["thread_id"], type(exc).__name__)
        return Sent(False, f"Slack unreachable ({type(exc).__name__})")


def refused(exc: Any) -> Sent:
    """A Slack error answer: retried when it may pass (rate limit, 5xx), else given up."""
    response = exc.response
    status = int(getattr(response, "status_code", 0) or 0)
    data = getattr(response, "data", None)
    error = str(data.get("error") or "") if isinstance(data, dict) else ""
    detail = f"Slack {error or 'error'} (HTTP {status})"
    headers = getattr(response, "headers", None) or {}
    wait = {k.lower(): v for k, v in headers.items()}.get("retry-after")
    try:
        after = float(wait[0] if isinstance(wait, list) else wait) if wait else None
    except ValueError:
        after = None
    transient = status == 429 or status >= 500 or error in TRANSIENT
    return Sent(False, detail, final=not transient, retry_after=after)


def _still_waiting(tables: Tables, owed: dict[str, Any]) -> bool:
    run = tables.runs().get(owed["thread_id"])
    return (
        run is not None
        and run.status == Status.WAITING
        and (run.interrupt_id == owed["interrupt_id"])
    )


def drain() -> None:
    """Wait until this process's sending thread is idle (tests; a clean shutdown)."""
    FLUSHER.wait()
