"""Signed webhook delivery from the local inbox, through an outbox table; and the same retries
for the other channels' deliveries (Slack, e-mail), dispatched by the row's target.

An answer and its outgoing ``interrupt.answered`` event commit in one transaction, so a decision
is never recorded without its delivery being owed. Delivery is retried with backoff by whoever
flushes the outbox next (the inbox CLI right away, then ``recover.py`` or ``python -m inbox
deliver``), so it survives a restart of either side. Each row keeps its ``svix-id`` across
attempts, as Svix does, and is signed anew each time (the timestamp changes).

A row whose ``url`` is not ``http(s)://`` names a channel (``slack:``, ``mail:<key id>``): it is
sent by that channel's sender in the :class:`Senders` the process was built with
(``ops.channels.senders``; ``inbox/`` may not import ``ops/``), with the same backoff, limit and
order per thread. Nothing registers at import: an ``Outbox`` built without senders sends
webhooks only, leaving channel rows to a process built with their sender.

Each channel is its own *lane* (``webhook``, ``slack``, ``mail``) with its own sending thread,
so a mail server that takes seconds per message never holds back a webhook or a Slack post
owed by the same transition (issue 37). Order is kept per receiver and thread, which never
spans two lanes. Webhooks reuse one HTTP client (its keep-alive connections) across rounds.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from core import settings, tracing
from core.errors import UserError, one_line
from store import outbox as table
from store.db import Tx
from store.outbox import OutboxRow
from store.tables import Clock, Tables

if TYPE_CHECKING:
    import httpx
    from standardwebhooks.webhooks import Webhook

log = logging.getLogger("inbox.outbox")
SEND_TIMEOUT = 10.0
NOTIFICATION = "notification:"  # event_type prefix of operator notifications (ops.notify)
MAX_ROUNDS = 20  # reads of the due rows per flush (each sends every thread's next event)
CHANNEL_LEASE = 60.0  # seconds a channel row is one sender's (an SMTP exchange has several steps)


def webhook_url() -> str | None:
    return settings.WEBHOOK_URL.get()


def signer() -> Webhook:
    """A standard-webhooks signer for ``WEBHOOK_SECRET`` (what ``svix.webhooks`` wraps)."""
    from standardwebhooks.webhooks import Webhook

    secret = settings.WEBHOOK_SECRET.get()
    if not secret:
        raise UserError(
            "WEBHOOK_URL is set but WEBHOOK_SECRET is not: set the secret the webhook app "
            "verifies with (see .env.example)"
        )
    return Webhook(secret[0])  # checked at start-up; the first one signs while rotating


def notify_signer() -> Webhook | None:
    """A Standard Webhooks signer for ``NOTIFY_SECRET``, or None to send unsigned."""
    from standardwebhooks.webhooks import Webhook

    secret = settings.NOTIFY_SECRET.get()
    if not secret:
        return None
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except ValueError:
        key = b""
    if len(key) < 16 or " " in secret:
        raise UserError("NOTIFY_SECRET must be one whsec_... secret of at least 16 bytes")
    return Webhook(secret)


@dataclass
class Delivery:
    message_id: str
    url: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Sent:
    """What a channel's sender made of one row. ``final``: a permanent refusal (retrying cannot
    help), given up at once with ``detail`` kept as the row's last error. ``retry_after``: the
    least wait the far end asked for (Slack's ``Retry-After``)."""

    ok: bool
    detail: str
    final: bool = False
    retry_after: float | None = None


# A channel's sender: one owed row in, what became of it out; it raises nothing.
Channel = Callable[[Tables, OutboxRow], Sent]


def channel_of(url: str) -> str | None:
    """``slack`` of ``slack:``, ``mail`` of ``mail:k1``; None for a webhook receiver."""
    scheme, colon, _ = url.partition(":")
    return None if not colon or scheme in ("http", "https") else scheme


WEBHOOK = "webhook"  # the lane of http(s) receivers; a channel's lane is its name


def lane_of(url: str) -> str:
    """Which sender sends a row: its channel's, or the webhooks'."""
    return channel_of(url) or WEBHOOK


@dataclass(frozen=True)
class Senders:
    """What this process can send besides webhooks, built once where the process is built
    (``ops.channels.senders``) and handed to its outboxes and the :data:`FLUSHER`, so whether
    a Slack or mail row goes out never depends on which modules happened to be imported."""

    channels: Mapping[str, Channel] = field(default_factory=dict)  # by channel name
    # lanes whose sends may take seconds (SMTP): a sweep sends them after every other lane and
    # does not wait for their thread
    slow: frozenset[str] = frozenset()
    # called when a lane's thread goes idle, with the lane: a channel closes what it kept open
    # for the round (the SMTP connection)
    on_idle: tuple[Callable[[str], None], ...] = ()
    # called with every delivery attempt, whoever sends it (the metrics count them here)
    on_sent: tuple[Callable[[Delivery], None], ...] = ()

    def lanes(self) -> list[str]:
        """Every lane this process can send, the slow ones last."""
        return sorted((WEBHOOK, *self.channels), key=lambda lane: lane in self.slow)


WEBHOOKS_ONLY = Senders()

_CLIENT: list[httpx.Client] = []
_CLIENT_LOCK = threading.Lock()


def http_client() -> httpx.Client:
    """One client for every webhook send of the process: its pool keeps connections (and TLS
    sessions) alive between deliveries, instead of a new handshake per round."""
    with _CLIENT_LOCK:
        if not _CLIENT:
            import httpx

            _CLIENT.append(httpx.Client(timeout=SEND_TIMEOUT))
        return _CLIENT[0]


def enqueue(
    tx: Tx,
    url: str,
    event: dict[str, Any],
    *,
    message_id: str | None = None,
    event_type: str | None = None,
    body: str | None = None,
    thread_key: str | None = None,
) -> str:
    """Owe a delivery, inside the caller's transaction. Notifications pass their own stable
    ``message_id``, an ``event_type`` starting ``notification:`` (signed with
    ``NOTIFY_SECRET`` in Standard Webhooks headers) and the ``body`` to send."""
    message_id = message_id or "msg_" + uuid.uuid4().hex
    table.enqueue(
        tx,
        message_id=message_id,
        url=url,
        event_type=event_type or event["type"],
        payload=body if body is not None else json.dumps(event),
        now=time.time(),
        thread_key=thread_key,
    )
    return message_id


class Outbox:
    def __init__(self, tables: Tables, clock: Clock = time.time, senders: Senders = WEBHOOKS_ONLY):
        self.tables = tables
        self.rows = tables.outbox()
        self.clock = clock
        self.senders = senders

    def undelivered(self) -> int:
        return self.rows.undelivered(max_attempts=settings.WEBHOOK_MAX_ATTEMPTS.get())

    def deliver_due(
        self, *, notifications_only: bool = False, lane: str | None = None
    ) -> list[Delivery]:
        """Send every delivery that is due (of one ``lane`` only, when given), once each;
        failures are rescheduled with backoff.

        A thread's next event becomes due only once the one before it is delivered, so this
        reads again while a round delivered something (bounded: a backlog waits for the next)."""
        results: list[Delivery] = []
        for _ in range(MAX_ROUNDS):
            sent = self._round(notifications_only, lane)
            results += sent
            if not any(d.ok for d in sent):
                break
        return results

    def _round(self, notifications_only: bool, lane: str | None = None) -> list[Delivery]:
        max_attempts = settings.WEBHOOK_MAX_ATTEMPTS.get()
        owed = self.rows.due(now=self.clock(), max_attempts=max_attempts)
        if lane is not None:
            owed = [r for r in owed if lane_of(r.url) == lane]
        notify = [r for r in owed if r.event_type.startswith(NOTIFICATION)]
        inbox = [] if notifications_only else [r for r in owed if r not in notify]
        if not notify and not inbox:
            return []
        signers = {NOTIFICATION: notify_signer() if notify else None}
        results = []
        failed: set[tuple[str, str]] = set()  # (url, thread) that failed in this round
        client = http_client()
        for row in notify + inbox:
            key_of = (row.url, row.thread_key or "")
            if row.thread_key and key_of in failed:
                continue  # keep the thread's order: its earlier event is still owed
            channel = channel_of(row.url)
            if channel is not None and channel not in self.senders.channels:
                continue  # this process cannot send it; one built with its sender can
            now = self.clock()
            lease = CHANNEL_LEASE if channel else SEND_TIMEOUT + 5
            if not self.rows.take(row.id, now=now, until=now + lease):
                continue
            if channel is not None:
                delivery = self._dispatch(self.senders.channels[channel], row)
                if not delivery.ok:
                    failed.add(key_of)
                results.append(delivery)
                continue
            is_notification = row.event_type.startswith(NOTIFICATION)
            key = NOTIFICATION if is_notification else "svix"
            if key not in signers:
                signers[key] = signer()  # only inbox deliveries need WEBHOOK_SECRET
            prefix = "webhook" if is_notification else "svix"
            delivery = self._send(client, signers[key], row, prefix)
            if not delivery.ok:
                failed.add(key_of)
            results.append(delivery)
        return results

    def _send(
        self, client: httpx.Client, webhook: Webhook | None, row: OutboxRow, prefix: str = "svix"
    ) -> Delivery:
        sent_at = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            f"{prefix}-id": row.message_id,
            f"{prefix}-timestamp": str(int(sent_at.timestamp())),
        }
        if webhook is not None:
            headers[f"{prefix}-signature"] = webhook.sign(row.message_id, sent_at, row.payload)
        with self._traced(row):  # the receiver joins the run's trace by ``traceparent``
            headers.update({"traceparent": t} if (t := tracing.current()) else {})
            try:
                response = client.post(row.url, content=row.payload.encode(), headers=headers)
                ok, detail = response.is_success, f"HTTP {response.status_code}"
            except Exception as exc:  # noqa: BLE001 - any transport failure is retried
                ok, detail = False, one_line(exc, 300)
        return self._settle(row, Sent(ok, detail))

    def _traced(self, row: OutboxRow) -> Any:
        """A client span in the trace of the run the delivery is about (no-op while off)."""
        if not tracing.enabled():
            return nullcontext(tracing.NULL)
        parent = self.tables.traces().traceparent_of(row.thread_key) if row.thread_key else None
        attributes = {"approval_worker.event_type": row.event_type, "http.request.method": "POST"}
        return tracing.span("POST", parent=parent, kind="client", attributes=attributes)

    def _dispatch(self, channel: Channel, row: OutboxRow) -> Delivery:
        try:
            sent = channel(self.tables, row)
        except Exception as exc:  # noqa: BLE001 - a sender's bug is retried, not a dead flusher
            log.warning("delivery %s failed (%s)", row.message_id, type(exc).__name__)
            sent = Sent(False, type(exc).__name__)
        return self._settle(row, sent)

    def _settle(self, row: OutboxRow, sent: Sent) -> Delivery:
        """Delivered, given up (a permanent refusal), or due again after the backoff."""
        max_attempts = settings.WEBHOOK_MAX_ATTEMPTS.get()
        if sent.ok:
            self.rows.mark_delivered(row.id, now=self.clock())
        elif sent.final:
            attempts = max(row.attempts + 1, max_attempts)
            self.rows.give_up(row.id, attempts=attempts, error=sent.detail)
            log.warning("delivery %s given up: %s", row.message_id, sent.detail)
        else:
            delay = min(settings.WEBHOOK_RETRY_BASE_SECONDS.get() * 2**row.attempts, 3600.0)
            delay = max(delay, min(sent.retry_after or 0.0, 3600.0))
            self.rows.retry_later(row.id, at=self.clock() + delay, error=sent.detail)
        delivery = Delivery(row.message_id, row.url, sent.ok, sent.detail)
        for hook in self.senders.on_sent:
            hook(delivery)
        return delivery


class _Lane:
    """One lane's sending thread: at most one at a time; a kick while it sends makes it read
    again."""

    def __init__(self, name: str, flusher: Flusher) -> None:
        self.name = name
        self.flusher = flusher
        self.lock = threading.Lock()
        self.again = False
        self.thread: threading.Thread | None = None
        self.stores: dict[Tables, None] = {}  # the stores woken for, in order, once each

    def kick(self, tables: Tables) -> None:
        with self.lock:
            self.stores[tables] = None
            self.again = True
            if self.thread is None or not self.thread.is_alive():
                name = f"notify-{self.name}"
                self.thread = threading.Thread(target=self._run, name=name, daemon=False)
                self.thread.start()

    def _run(self) -> None:
        while True:
            with self.lock:
                if not self.again:
                    self.thread = None
                    break
                self.again = False
                stores = list(self.stores)
                self.stores.clear()
            senders = self.flusher.senders
            for tables in stores:
                try:
                    outbox = Outbox(tables, senders=senders)
                    outbox.deliver_due(notifications_only=True, lane=self.name)
                except Exception:  # noqa: BLE001 - the sweep retries; never kill the sender
                    log.warning("sending %s failed; the sweep retries", self.name, exc_info=True)
        for hook in self.flusher.senders.on_idle:
            try:
                hook(self.name)
            except Exception:  # noqa: BLE001 - closing a kept connection is best effort
                log.debug("closing the %s lane's connection failed", self.name, exc_info=True)

    def wait(self, timeout: float) -> None:
        with self.lock:
            thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


class Flusher:
    """Sends owed notifications right after the transition that owed them commits, on threads
    of the process that made it, so nobody waits for the next sweep.

    One sending thread per lane (webhooks, Slack, e-mail), so a slow channel delays only its
    own rows. The threads are not daemons, so a short-lived process (``run.py``) sends before
    it exits. A failure stays in the outbox for the sweep or ``inbox deliver``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lanes: dict[str, _Lane] = {}
        self.senders = WEBHOOKS_ONLY  # until the process is built (``wire``)

    def wire(self, senders: Senders) -> None:
        """Send with ``senders``: called where the process is built (the runner), not at import."""
        self.senders = senders

    def _lane(self, name: str) -> _Lane:
        with self._lock:
            if name not in self._lanes:
                self._lanes[name] = _Lane(name, self)
            return self._lanes[name]

    def kick(self, tables: Tables, lanes: Iterable[str] | None = None) -> None:
        """Wake the senders of ``lanes`` (default: every lane: webhooks and each registered
        channel) for the rows ``tables``' store owes."""
        tables.before_close(self.wait)
        for name in self.senders.lanes() if lanes is None else lanes:
            self._lane(name).kick(tables)

    def wait(self, timeout: float = 30.0, lanes: Iterable[str] | None = None) -> None:
        """Until this process's sending threads (of ``lanes``; default all) are idle (the
        sweep flushes after them; tests)."""
        with self._lock:
            chosen = [x for n, x in self._lanes.items() if lanes is None or n in set(lanes)]
        for lane in chosen:
            lane.wait(timeout)


FLUSHER = Flusher()
