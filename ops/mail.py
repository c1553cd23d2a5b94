"""Approval requests by e-mail, with links that are safe to receive.

When a run pauses for approval, each reviewer with an address (an API key carrying ``email``,
see :meth:`store.keys.KeyStore.mailed_reviewers`) who may approve it gets one message: the
business summary, its fields, the deadline and two links, Approve and Reject. A link carries a
signed token (HMAC-SHA256 with ``EMAIL_LINK_SECRET``) bound to the key, the reviewer, the run,
the request (interrupt id and digest), the action and the request's deadline, so it decides
exactly what the message showed, as that reviewer only, until the request expires. Opening a
link changes nothing (mail scanners open links); its page's POST decides, once
(``api/mail.py``, ``store/mail.py``).

Messages are composed right after the pause commits and sent on one sending thread per process
through ``smtplib`` (STARTTLS, TLS or a plain local relay), so SMTP never holds a transaction.
Off until ``SMTP_HOST``, ``EMAIL_FROM``, ``EMAIL_LINK_SECRET`` and ``PUBLIC_URL`` are set.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import smtplib
import ssl
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from email.message import EmailMessage
from email.utils import formatdate, make_msgid, parseaddr
from typing import Any

from core import settings
from core.authority import Bands
from core.errors import UserError
from core.settings.channels import email_on
from inbox.duties import normalize
from inbox.hitl import HitlRequest
from inbox.views import ActionView
from store.db import Database
from store.keys import Key, KeyStore
from store.states import Event, Run

log = logging.getLogger("ops.mail")

Views = Callable[[str, Any], Sequence[ActionView]]
Amount = Callable[[str, Any], Decimal | None]  # a workflow's reading of a request's amount
ACTIONS = ("approve", "reject")
VERSION = "v1"
DOMAIN = b"approval-worker e-mail link v1\n"  # what these MACs are for, nothing else
MAX_TOKEN = 2048
SEND_TIMEOUT = 10.0
PATH = "/email/decide"
_SENDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="email")


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


def recipients(db: Database, run: Run, amount: Amount | None = None) -> list[Key]:
    """Who gets the request: live reviewer keys with an address, one message per person and
    address; not the requester under separation of duties; under an authority matrix, only
    keys holding one of the groups of the band the request's amount falls in."""
    groups: set[str] | None = None
    if run.authority is not None:
        value: Decimal | None = None
        if amount is not None:
            try:
                value = amount(run.workflow, HitlRequest.parse(run.request))
            except Exception:  # noqa: BLE001 - unreadable: the highest band, as the path does
                value = None
        bands = Bands.from_json(run.authority)
        groups = set(bands.bands[bands.band(value)].groups)
    requester = normalize(run.requested_by) if run.separation and run.requested_by else None
    seen: set[tuple[str, str]] = set()
    chosen = []
    for key in KeyStore(db).mailed_reviewers():
        mark = (normalize(key.name), str(key.email).casefold())
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


def body_text(run: Run, views: Sequence[ActionView], key: Key, links: dict[str, str]) -> str:
    from ops.notify import inbox_link, iso

    summary = flat("; ".join(v.summary for v in views) or run.workflow, 1000)
    lines = [f"{key.name}, a request waits for your decision.", "", f"Proposed: {summary}", ""]
    for view in views:
        if len(views) > 1:
            lines.append(f"- {flat(view.summary)}")
        lines += [f"  {flat(f.label, 100)}: {flat(f.text)}" for f in (*view.fields, *view.context)]
    facts = [f"Run {run.thread_id}"]
    if run.requested_by:
        facts.append(f"requested by {flat(run.requested_by, 200)}")
    facts.append(f"decide by {iso(float(expiry_of(run)))}")
    if (run.quorum or 1) > 1:
        facts.append(f"needs {run.quorum} approvals")
    lines += ["", "; ".join(facts) + ".", ""]
    lines += [f"{action.capitalize()}: {url}" for action, url in links.items()]
    page = inbox_link(run.interrupt_id)
    if page:
        lines += ["", f"Open it in the web inbox: {page}"]
    lines += [
        "",
        "Each link opens a page that says what will happen; nothing is decided until you press",
        f"its button. The links decide as {key.name}, once, until the deadline: do not forward",
        "this e-mail.",
    ]
    return "\n".join(lines) + "\n"


def compose(run: Run, views: Sequence[ActionView], key: Key) -> EmailMessage | None:
    """One reviewer's message, or None when there is nothing to decide by link."""
    assert run.interrupt_id is not None and key.email is not None
    request = HitlRequest.parse(run.request)
    if any(a.question for a in request.actions):
        return None  # plain questions take typed answers: the page, not two links
    actions = allowed_actions(request)
    if not actions:
        return None
    links = {
        action: url_of(
            mint(
                Link(
                    key.id,
                    key.name,
                    run.thread_id,
                    run.interrupt_id,
                    run.request_digest,
                    action,
                    expiry_of(run),
                )
            )
        )
        for action in actions
    }
    sender = str(settings.EMAIL_FROM.get())
    summary = flat("; ".join(v.summary for v in views) or run.workflow, 200)
    message = EmailMessage()
    message["Subject"] = f"Approval requested: {summary}"[:200]
    message["From"] = sender
    message["To"] = key.email
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid(domain=parseaddr(sender)[1].rpartition("@")[2] or None)
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies, please
    message.set_content(body_text(run, views, key, links))
    return message


def send(messages: Sequence[EmailMessage]) -> int:
    """Send over one SMTP connection; how many went. A refused recipient does not stop the
    others; what failed is logged by kind and count, never with a credential."""
    host, port = str(settings.SMTP_HOST.get()), settings.SMTP_PORT.get()
    tls = settings.SMTP_TLS.get()
    context = ssl.create_default_context()
    smtp = (
        smtplib.SMTP_SSL(host, port, timeout=SEND_TIMEOUT, context=context)
        if tls == "ssl"
        else smtplib.SMTP(host, port, timeout=SEND_TIMEOUT)
    )
    sent = 0
    with smtp:
        if tls == "starttls":
            smtp.starttls(context=context)
        user = settings.SMTP_USERNAME.get()
        if user:
            smtp.login(user, settings.SMTP_PASSWORD.get() or "")
        for message in messages:
            try:
                smtp.send_message(message)
                sent += 1
            except smtplib.SMTPException as exc:
                log.warning("e-mail: a message was not sent (%s)", type(exc).__name__)
    return sent


class Mail:
    """After a pause commits: compose each reviewer's message, send them on the mail thread."""

    def __init__(self, db: Database, views: Views | None = None, amount: Amount | None = None):
        self.db = db
        self.views = views
        self.amount = amount

    def committed(self, run: Run, reason: str) -> Future[int] | None:
        """Never raises: mail that cannot go out must not stop a run."""
        if reason != Event.PAUSED or not run.interrupt_id or run.request is None:
            return None
        if not email_on():
            return None
        try:
            from ops.notify import views_of

            views = views_of(run, self.views)
            composed = [compose(run, views, k) for k in recipients(self.db, run, self.amount)]
        except Exception as exc:  # noqa: BLE001
            log.warning("e-mail: run %s not mailed (%s)", run.thread_id, type(exc).__name__)
            return None
        messages = [m for m in composed if m is not None]
        if not messages:
            return None
        return _SENDER.submit(_send_safely, run.thread_id, messages)


def _send_safely(thread_id: str, messages: list[EmailMessage]) -> int:
    try:
        sent = send(messages)
    except Exception as exc:  # noqa: BLE001 - SMTP down must not stop anything else
        log.warning("e-mail: run %s not mailed (%s)", thread_id, type(exc).__name__)
        return 0
    log.info("e-mail: run %s mailed to %d of %d reviewers", thread_id, sent, len(messages))
    return sent


def drain() -> None:
    """Wait until every message submitted so far is sent or given up (tests; shutdown)."""
    _SENDER.submit(lambda: None).result(timeout=60)
