"""Approval requests by e-mail, with links that are safe to receive.

When a run pauses for approval, each reviewer with an address (an API key carrying ``email``,
see :meth:`store.keys.KeyStore.mailed_reviewers`) who may approve it gets one message: the
business summary, its fields, the deadline and two links, Approve and Reject. A link carries a
signed token (HMAC-SHA256 with ``EMAIL_LINK_SECRET``) bound to the key, the reviewer, the run,
the request (interrupt id and digest), the action and the request's deadline, so it decides
exactly what the message showed, as that reviewer only, until the request expires. Opening a
link changes nothing (mail scanners open links); its page's POST decides, once
(``api/mail.py``, ``store/mail.py``).

Each reviewer's message is an outbox row (``url`` ``mail:<key id>``, one stable id per request
and key, so it is owed once) committed in the pause's own transaction; the process that paused
sends it right after the commit (``inbox.outbox.FLUSHER``) through ``smtplib`` (STARTTLS, TLS or
a plain local relay), and the sweep or ``python -m inbox deliver`` retries it with the webhooks'
backoff, so an SMTP outage loses nothing. The row keeps the text, not the links: they are signed
when the message is sent, so no link is stored. A message is no longer sent once its request is
no longer waiting or its key is revoked. A connection failure or a 4xx answer is retried; a 5xx
answer (a refused recipient, failed login) gives the row up with the reply code kept. Off until
``SMTP_HOST``, ``EMAIL_FROM``, ``EMAIL_LINK_SECRET`` and ``PUBLIC_URL`` are set.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import smtplib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from email.message import EmailMessage
from email.utils import formatdate, parseaddr
from typing import Any

from core import settings
from core.authority import Bands, needs_phrase
from core.errors import UserError
from core.hitl import HitlRequest
from core.identity import identity_key
from core.moments import moment
from core.settings.channels import email_on
from inbox.outbox import FLUSHER, NOTIFICATION, Sent, enqueue
from inbox.views import ActionView
from ops.shown import Shown
from ops.smtp import send_one
from store.db import Database, Tx
from store.keys import Key, mailed_reviewers
from store.outbox import OutboxRow
from store.states import Event, Run, Status
from store.tables import Tables

log = logging.getLogger("ops.mail")

Amount = Callable[[str, Any], Decimal | None]  # a workflow's reading of a request's amount
ACTIONS = ("approve", "reject")
VERSION = "v1"
DOMAIN = b"approval-worker e-mail link v1\n"  # what these MACs are for, nothing else
MAX_TOKEN = 2048
SEND_TIMEOUT = 10.0
PATH = "/email/decide"


class LinkRefused(UserError):
    """A link that decides nothing: why, with the HTTP status and code the route answers."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Link:
    """What a token says: this key's holder may take ``action`` on this request until then."""

    key_id: str
    reviewer: str
    thread_id: str
    interrupt_id: str
    digest: str | None
    action: str
    expires_at: int


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(body: str) -> str:
    key = str(settings.EMAIL_LINK_SECRET.get() or "").encode()
    if not key:
        raise LinkRefused(404, "not_found", "e-mail links are not configured here")
    return _b64(hmac.new(key, DOMAIN + body.encode(), hashlib.sha256).digest())


def mint(link: Link) -> str:
    """The token of ``link``: ``v1.<payload>.<mac>``, URL-safe."""
    payload = {
        "k": link.key_id,
        "r": link.reviewer,
        "t": link.thread_id,
        "i": link.interrupt_id,
        "d": link.digest,
        "a": link.action,
        "e": link.expires_at,
    }
    body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    return f"{VERSION}.{body}.{_mac(body)}"


def read(token: str, now: float) -> Link:
    """The link a token names, if this app signed it and it has not expired; else
    :class:`LinkRefused` (403 ``bad_link``: altered, cut or forged; 410 ``expired``)."""
    bad = LinkRefused(403, "bad_link", "this link is not valid: open it from the e-mail as sent")
    parts = token.split(".") if 0 < len(token) <= MAX_TOKEN else []
    if len(parts) != 3 or parts[0] != VERSION:
        raise bad
    if not hmac.compare_digest(_mac(parts[1]).encode(), parts[2].encode()):
        raise bad
    try:
        raw = json.loads(_unb64(parts[1]))
        link = Link(
            str(raw["k"]),
            str(raw["r"]),
            str(raw["t"]),
            str(raw["i"]),
            None if raw["d"] is None else str(raw["d"]),
            str(raw["a"]),
            int(raw["e"]),
        )
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise bad from None  # signed by us, so never in practice: a changed format
    if link.action not in ACTIONS:
        raise bad
    if link.expires_at <= now:
        raise LinkRefused(410, "expired", "this link has expired with its request")
    return link


def url_of(token: str) -> str:
    base = str(settings.PUBLIC_URL.get() or "").rstrip("/")
    return f"{base}{PATH}?token={token}"


def allowed_actions(request: HitlRequest) -> list[str]:
    """Approve and Reject, as far as every proposed action allows them."""
    count = len(request.actions)
    return [a for a in ACTIONS if all(a in request.allowed(i) for i in range(count))]


def recipients(db: Database | Tx, run: Run, amount: Amount | None = None) -> list[Key]:
    """Who gets the request: live reviewer keys with an address, one message per person and
    address; not the requester under separation of duties; under an authority matrix, only
    keys holding one of the groups of the band the request's amount falls in."""
    groups: set[str] | None = None
    if run.authority is not None:
        value: Decimal | None = None
        if amount is not None:
            try:
                value = amount(run.workflow, run.asked)
            except Exception:  # noqa: BLE001 - unreadable: the highest band, as the path does
                value = None
        bands = Bands.from_json(run.authority)
        groups = set(bands.bands[bands.band(value)].groups)
    requester = identity_key(run.requested_by) if run.separation and run.requested_by else None
    seen: set[tuple[str, str]] = set()
    chosen = []
    for key in mailed_reviewers(db):
        mark = (identity_key(key.name), str(key.email).casefold())
        if mark in seen or mark[0] == requester:
            continue
        if groups is not None and not key.groups & groups:
            continue
        seen.add(mark)
        chosen.append(key)
    return chosen


def expiry_of(run: Run) -> int:
    """Links expire with the request (every paused run has a deadline)."""
    at = run.expires_at or run.updated_at + float(settings.APPROVAL_EXPIRES_IN.get())
    return int(at)


def flat(text: str, limit: int = 500) -> str:
    """One line: what an agent proposed cannot start a line of its own (a fake "Approve:")."""
    return " ".join(str(text).split())[:limit]


def body_parts(run: Run, views: Sequence[ActionView], key: Key) -> tuple[str, str]:
    """The text before the links and after them (the links are signed when it is sent)."""
    from ops.notify import inbox_link

    summary = flat("; ".join(v.summary for v in views) or run.workflow, 1000)
    lines = [f"{key.name}, a request waits for your decision.", "", f"Proposed: {summary}", ""]
    for view in views:
        if len(views) > 1:
            lines.append(f"- {flat(view.summary)}")
        lines += [f"  {flat(f.label, 100)}: {flat(f.text)}" for f in (*view.fields, *view.context)]
        if view.warning:
            lines.append(f"  Check first: {flat(view.warning, 1000)}")
    facts = []
    if run.requested_by:
        facts.append(f"Requested by {flat(run.requested_by, 200)}")
    facts.append(f"decide by {moment(float(expiry_of(run)))}")
    needs = needs_phrase(run.approver_groups or (), run.quorum or 1)  # as approval.needs
    if needs:
        facts.append(f"needs {needs}")
    lines += ["", "; ".join(facts) + ".", ""]
    tail: list[str] = []
    page = inbox_link(run.interrupt_id)
    if page:
        tail += ["", f"Open it in the web inbox: {page}"]
    tail += [
        "",
        "Each link opens a page that says what will happen; nothing is decided until you press",
        f"its button. The links decide as {key.name}, once, until the deadline: do not forward",
        "this e-mail.",
    ]
    return "\n".join(lines) + "\n", "\n".join(tail) + "\n"


def draft(run: Run, views: Sequence[ActionView], key: Key) -> dict[str, Any] | None:
    """One reviewer's message as the outbox keeps it (no link in it), or None when there is
    nothing to decide by link."""
    assert run.interrupt_id is not None and key.email is not None
    request = run.asked
    if any(a.question for a in request.actions):
        return None  # plain questions take typed answers: the page, not two links
    actions = allowed_actions(request)
    if not actions:
        return None
    head, tail = body_parts(run, views, key)
    summary = flat("; ".join(v.summary for v in views) or run.workflow, 200)
    return {
        "key_id": key.id,
        "reviewer": key.name,
        "thread_id": run.thread_id,
        "interrupt_id": run.interrupt_id,
        "digest": run.request_digest,
        "expires_at": expiry_of(run),
        "actions": actions,
        "subject": f"Approval requested: {summary}"[:200],
        "head": head,
        "tail": tail,
    }


def assemble(owed: dict[str, Any], to: str) -> EmailMessage:
    """The message of a draft, its links signed now, with one Message-ID per request and key
    (a message sent again after a lost answer carries the same id)."""
    links = {
        action: url_of(
            mint(
                Link(
                    owed["key_id"],
                    owed["reviewer"],
                    owed["thread_id"],
                    owed["interrupt_id"],
                    owed["digest"],
                    action,
                    int(owed["expires_at"]),
                )
            )
        )
        for action in owed["actions"]
    }
    text = owed["head"] + "".join(f"{a.capitalize()}: {url}\n" for a, url in links.items())
    sender = str(settings.EMAIL_FROM.get())
    domain = parseaddr(sender)[1].rpartition("@")[2] or "approval-worker.invalid"
    mark = hashlib.sha256(f"{owed['interrupt_id']}|{owed['key_id']}".encode()).hexdigest()[:32]
    message = EmailMessage()
    message["Subject"] = owed["subject"]
    message["From"] = sender
    message["To"] = to
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = f"<{mark}@{domain}>"
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies, please
    message["X-Approval-Run"] = owed["thread_id"]  # for filters and support; not in the text
    message.set_content(text + owed["tail"])
    return message


def compose(run: Run, views: Sequence[ActionView], key: Key) -> EmailMessage | None:
    """One reviewer's message as it is sent, or None when there is nothing to decide by link."""
    owed = draft(run, views, key)
    return None if owed is None else assemble(owed, str(key.email))


class Mail:
    """In a pause's transaction: owe each reviewer's message; the outbox sends it."""

    def __init__(self, amount: Amount | None = None):
        self.amount = amount

    @staticmethod
    def owes(run: Run, reason: str) -> bool:
        """Whether this transition may owe mail (cheap: no reads)."""
        return reason == Event.PAUSED and bool(run.interrupt_id) and email_on()

    def owe(self, tx: Tx, run: Run, reason: str, shown: Shown) -> int:
        """How many reviewers' messages this transition owes (0: none, or mail is off). A
        message that cannot be composed is logged and left out: mail must not stop a run."""
        if not self.owes(run, reason) or run.request is None:
            return 0
        views = shown.views
        owed = 0
        for key in recipients(tx, run, self.amount):
            try:
                body = draft(run, views, key)
            except Exception as exc:  # noqa: BLE001
                log.warning("e-mail: run %s not mailed (%s)", run.thread_id, type(exc).__name__)
                continue
            if body is None:
                continue
            owe(tx, run, key, body, f"{run.interrupt_id}|{key.id}")
            owed += 1
        return owed


def owe(tx: Tx, run: Run, key: Key, body: dict[str, Any], mark: str) -> None:
    """Owe ``key`` one e-mail in ``tx``; ``mark`` names what it says, so the same message is
    never owed twice (its outbox id is derived from it)."""
    enqueue(
        tx,
        f"mail:{key.id}",
        {},
        message_id="eml_" + hashlib.sha256(mark.encode()).hexdigest()[:32],
        event_type=NOTIFICATION + "email",
        body=json.dumps(body),
        thread_key=run.thread_id,
    )


def deliver(tables: Tables, row: OutboxRow) -> Sent:
    """Send one reviewer's owed message, unless its request or its key has moved on."""
    if not email_on():
        return Sent(False, "e-mail is not configured", final=True)
    owed = json.loads(row.payload)
    run = tables.runs().get(owed["thread_id"])
    if run is None or run.status != Status.WAITING or run.interrupt_id != owed["interrupt_id"]:
        return Sent(True, "no longer waiting: not mailed")
    key = tables.keys().get(owed["key_id"])
    if key is None or not key.reviews or not key.email:
        return Sent(True, "key revoked or without an address: not mailed")
    try:
        send_one(assemble(owed, key.email))
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        final = bool(codes) and min(codes) >= 500
        return _failed(owed, f"recipient refused (SMTP {max(codes, default=0)})", final)
    except smtplib.SMTPResponseException as exc:
        return _failed(owed, f"SMTP {exc.smtp_code}", exc.smtp_code >= 500)
    except (OSError, smtplib.SMTPException) as exc:  # refused, timed out, disconnected
        return _failed(owed, f"SMTP unreachable ({type(exc).__name__})", False)
    log.info("e-mail: run %s mailed to key %s", owed["thread_id"], owed["key_id"])
    return Sent(True, "mailed")


def _failed(owed: dict[str, Any], detail: str, final: bool) -> Sent:
    log.warning("e-mail: run %s to key %s: %s", owed["thread_id"], owed["key_id"], detail)
    return Sent(False, detail, final=final)


def drain() -> None:
    """Wait until this process's sending thread is idle (tests; a clean shutdown)."""
    FLUSHER.wait()
