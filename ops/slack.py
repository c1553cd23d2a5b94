"""Approval requests as Slack messages with buttons, kept up to date in place.

A paused run is posted to ``SLACK_CHANNEL`` through the Slack Web API (``chat.postMessage``) as
Block Kit: the business summary, its fields, the deadline, the quorum and Approve / Reject
buttons whose value names the request and the digest of what the message shows, so a press
decides exactly that request (``api/slack.py`` takes it through the one decision path). Once
the request is decided, expires, is cancelled or the run ends, the message is replaced
(``chat.update``) with the outcome and who decided, wherever the decision was made.

Posting happens after the transition commits, on one sending thread per process, so Slack
never holds a transaction. Off until ``SLACK_BOT_TOKEN``, ``SLACK_SIGNING_SECRET`` and
``SLACK_CHANNEL`` are set.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from core import settings
from core.settings.channels import slack_on
from inbox.hitl import HitlRequest
from inbox.views import ActionView
from store.db import Database
from store.run_reads import last_claim_in
from store.slack import Message, SlackTables
from store.states import Event, Run

log = logging.getLogger("ops.slack")

Views = Callable[[str, Any], Sequence[ActionView]]
ENDED: dict[str, str] = {
    Event.CLAIMED: "decided",
    Event.FINISHED: "done",
    Event.EXPIRED: "expired",
    Event.CANCELLED: "cancelled",
    Event.FAILED: "failed",
}
_SENDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slack")


def button_value(run: Run) -> str:
    """What a button carries back: the request and the digest of what the message shows."""
    return json.dumps({"t": run.thread_id, "i": run.interrupt_id, "d": run.request_digest})


def request_blocks(run: Run, views: Sequence[ActionView], progress: str = "") -> list[dict]:
    from ops.notify import inbox_link, iso

    summary = "; ".join(v.summary for v in views) or run.workflow
    fields = [
        {"type": "mrkdwn", "text": f"*{f.label}*\n{f.text}"[:1900]}
        for v in views
        for f in (*v.fields, *v.context)
    ][:10]
    facts = [f"run `{run.thread_id}`"]
    if run.expires_at:
        facts.append(f"decide by {iso(run.expires_at)}")
    if (run.quorum or 1) > 1:
        facts.append(f"needs {run.quorum} approvals")
    if run.requested_by:
        facts.append(f"requested by {run.requested_by}")
    if progress:
        facts.append(progress)
    buttons: list[dict[str, Any]] = [
        {
            "type": "button",
            "action_id": "approve",
            "style": "primary",
            "text": {"type": "plain_text", "text": "Approve"},
            "value": button_value(run),
        },
        {
            "type": "button",
            "action_id": "reject",
            "style": "danger",
            "text": {"type": "plain_text", "text": "Reject"},
            "value": button_value(run),
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
    if fields:
        blocks.append({"type": "section", "fields": fields})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(facts)}]})
    blocks.append({"type": "actions", "block_id": "decide", "elements": buttons})
    return blocks


class Slack:
    """Posts each request once and updates its message as the run moves on."""

    def __init__(self, db: Database, views: Views | None = None) -> None:
        self.db = db
        self.views = views
        self.tables = SlackTables(db)

    def client(self) -> Any:
        from slack_sdk import WebClient

        return WebClient(
            token=settings.SLACK_BOT_TOKEN.get(), base_url=settings.SLACK_API_URL.get()
        )

    def committed(self, run: Run, reason: str) -> Future[None] | None:
        """After a transition: post a new request, or show how one ended; never raises."""
        if reason != Event.PAUSED and reason not in ENDED or not run.interrupt_id:
            return None
        if not slack_on():
            return None
        return _SENDER.submit(self._safely, run, reason)

    def _safely(self, run: Run, reason: str) -> None:
        try:
            if reason == Event.PAUSED:
                self.post(run)
            else:
                self.show_outcome(run, reason)
        except Exception as exc:  # noqa: BLE001 - Slack down must not stop a run
            log.warning("slack: run %s not updated (%s)", run.thread_id, type(exc).__name__)

    def _views(self, run: Run) -> list[ActionView]:
        from ops.notify import views_of

        return views_of(run, self.views)

    def post(self, run: Run) -> None:
        assert run.interrupt_id is not None
        if self.tables.message(run.interrupt_id) is not None:
            return
        if any(a.question for a in HitlRequest.parse(run.request).actions):
            return  # plain questions take typed answers: the page, not two buttons
        views = self._views(run)
        channel = str(settings.SLACK_CHANNEL.get())
        text = "Approval requested: " + ("; ".join(v.summary for v in views) or run.workflow)
        sent = self.client().chat_postMessage(
            channel=channel, text=text[:3000], blocks=request_blocks(run, views)
        )
        message = Message(run.interrupt_id, run.thread_id, str(sent["channel"]), str(sent["ts"]))
        self.tables.remember(message)

    def progress(self, run: Run, approvers: Sequence[str], quorum: int) -> None:
        """A quorum still short: the buttons stay, with who approved so far."""
        message = self.tables.message(run.interrupt_id or "")
        if message is None:
            return
        text = f"{len(approvers)} of {quorum} approvals: {', '.join(approvers)}"
        blocks = request_blocks(run, self._views(run), progress=text)
        self.client().chat_update(channel=message.channel, ts=message.ts, text=text, blocks=blocks)

    def show_outcome(self, run: Run, reason: str) -> None:
        from ops.notify import outcome_of

        message = self.tables.message(run.interrupt_id or "")
        if message is None:
            return
        with self.db.transaction() as tx:
            claim = last_claim_in(tx, run.thread_id)
        summary = "; ".join(v.summary for v in self._views(run)) or run.workflow
        who = ", ".join((claim or {}).get("approvers") or [])
        if reason == Event.CLAIMED:
            kinds = {str(d.get("type")) for d in (run.decision or {}).get("decisions") or [] if d}
            word = "Rejected" if kinds == {"reject"} else "Approved"
            line = f"*{word}* by {who}: {summary}"
        else:
            kind = {"done": "run.done", "expired": "approval.expired"}.get(
                ENDED[reason], f"run.{ENDED[reason]}"
            )
            ended = outcome_of(kind, run, None, claim)
            line = f"*{str(ended['outcome']).capitalize()}*" + (
                f" by {who}" if who and kind == "run.done" else ""
            )
            line += f": {summary}"
            if ended.get("reason"):
                line += f" ({ended['reason']})"
        blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": line[:2900]}}]
        self.client().chat_update(
            channel=message.channel, ts=message.ts, text=line[:3000], blocks=blocks
        )


def drain() -> None:
    """Wait until every Slack call submitted so far is done (tests; a clean shutdown)."""
    _SENDER.submit(lambda: None).result(timeout=30)
