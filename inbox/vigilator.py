"""The Vigilator inbox: each approval request becomes a Vigilator interrupt, over its HTTP API.

Vigilator's ``POST api/interrupts`` has no idempotency key, and a POST that timed out may still
have created the interrupt. So every create is first recorded in ``vigilator_requests`` under the
pause's dedupe key (thread + graph interrupt ids), one process at a time may send it, and any
create that may already have landed (a timeout, a dropped connection, a gateway error, a process
that died mid-request) is reconciled by looking the interrupt up by ``externalId`` before it is
sent again. That lookup is ``GET api/interrupts?externalId=...`` returning a list of interrupt
records; it is the one part of the API this adapter assumes beyond the documented two endpoints.

Reads for a sweep go out in parallel (``VIGILATOR_CONCURRENCY``), so 1,000 waiting runs cost
about 1,000 / concurrency round trips of wall time instead of 1,000. httpx is imported only when
the first request is made, so commands that never talk to Vigilator do not pay for it.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError

from inbox.base import Approval
from inbox.events import AnsweredData, decided_by, to_decisions
from inbox.hitl import allowed_decisions
from store.db import Database, redact_url
from store.errors import UserError, one_line
from store.faults import fault

DEFAULT_BASE_URL = "https://api.vigilator.dev"  # the default of Vigilator's own Python SDK
RETRY_STATUSES = frozenset({429, 502, 503, 504})
FATAL_STATUSES = frozenset({401, 402, 403, 404})  # every other call would fail the same way
TITLE_MIN, TITLE_MAX = 2, 100
DESCRIPTION_MIN, DESCRIPTION_MAX = 2, 2000
MAX_ACTIONS, MAX_MESSAGES = 50, 200
MAX_BACKOFF = 8.0  # seconds, between two attempts of one call
MAX_RETRY_AFTER = 60.0  # a longer Retry-After gives up now rather than block a sweep
LOOKUP = "api/interrupts"

log = logging.getLogger(__name__)

INSERT_REQUEST = """
INSERT INTO vigilator_requests (dedupe_key, external_id, body, attempts, created_at)
VALUES (:dedupe_key, :external_id, :body, 0, :now)
ON CONFLICT (dedupe_key) DO NOTHING
"""

GET_REQUEST = "SELECT * FROM vigilator_requests WHERE dedupe_key = :dedupe_key"

# Only one process sends a given create at a time: the winner holds it until ``sending_until``.
TAKE_SEND = """
UPDATE vigilator_requests SET sending_until = :until
WHERE dedupe_key = :dedupe_key AND interrupt_id IS NULL
  AND (sending_until IS NULL OR sending_until < :now)
"""

# Counted before each POST goes out, so a process that dies mid-request leaves attempts > 0 and
# whoever opens the request next looks for the interrupt before creating another.
COUNT_ATTEMPT = """
UPDATE vigilator_requests SET attempts = attempts + 1, sending_until = :until
WHERE dedupe_key = :dedupe_key AND interrupt_id IS NULL
"""

RECORD_OPENED = """
UPDATE vigilator_requests SET interrupt_id = :interrupt_id, opened_at = :now,
       sending_until = NULL
WHERE dedupe_key = :dedupe_key AND interrupt_id IS NULL
"""

RELEASE_SEND = "UPDATE vigilator_requests SET sending_until = NULL WHERE dedupe_key = :dedupe_key"

KNOWN_IDS = """
SELECT interrupt_id FROM vigilator_requests
WHERE external_id = :external_id AND interrupt_id IS NOT NULL
"""


class VigilatorError(UserError):
    """A Vigilator call that failed for good (one line, no secrets).

    ``fatal`` means every other call would fail the same way (bad key, quota, wrong URL), so a
    sweep stops instead of repeating it a thousand times.
    """

    def __init__(self, message: str, *, status: int | None = None, fatal: bool = False):
        super().__init__(message)
        self.status = status
        self.fatal = fatal


def _setting(name: str, default: float, cast: Callable[[str], Any], minimum: float):
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise UserError(f"{name} must be a number (got {raw!r})") from None
    if value < minimum:
        raise UserError(f"{name} must be at least {minimum} (got {raw!r})")
    return value


@dataclass(frozen=True)
class Settings:
    """How to reach Vigilator; read from the environment by :meth:`from_env`."""

    api_key: str
    base_url: str = DEFAULT_BASE_URL
    timeout: float = 10.0
    retries: int = 4
    retry_base: float = 0.5
    concurrency: int = 16

    @classmethod
    def from_env(cls) -> Settings:
        key = (os.environ.get("VIGILATOR_API_KEY") or "").strip()
        if not key:
            raise UserError(
                "INBOX=vigilator needs VIGILATOR_API_KEY: set it to your Vigilator API key "
                "(see .env.example), or use INBOX=local"
            )
        base = os.environ.get("VIGILATOR_BASE_URL") or DEFAULT_BASE_URL
        if not base.startswith(("https://", "http://")):
            raise UserError(
                f"VIGILATOR_BASE_URL must start with https:// (got {redact_url(base)!r})"
            )
        return cls(
            api_key=key,
            base_url=base,
            timeout=_setting("VIGILATOR_TIMEOUT", 10.0, float, 0.01),
            retries=_setting("VIGILATOR_RETRIES", 4, int, 0),
            retry_base=_setting("VIGILATOR_RETRY_BASE_SECONDS", 0.5, float, 0),
            concurrency=_setting("VIGILATOR_CONCURRENCY", 16, int, 1),
        )


class Client:
    """The HTTP layer: one pooled ``httpx.Client``, bounded retries, one-line errors.

    Safe to share between threads (``get_many`` does), as ``httpx.Client`` is.
    """

    def __init__(self, settings: Settings, *, sleep: Callable[[float], None] = time.sleep):
        import httpx

        self.settings = settings
        self._httpx = httpx
        self._sleep = sleep
        pool = max(settings.concurrency, 4)
        self._http = httpx.Client(
            base_url=settings.base_url,
            headers={"x-api-key": settings.api_key, "accept": "application/json"},
            timeout=settings.timeout,
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
        )

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        body: dict | None = None,
        params: dict | None = None,
        missing_ok: bool = False,
        before_send: Callable[[], None] | None = None,
        reconcile: Callable[[], Any] | None = None,
    ) -> Any:
        """The decoded JSON of a 2xx (None for a 404 when ``missing_ok``), else VigilatorError.

        429/502/503/504, timeouts and connection errors are retried with capped, jittered
        backoff (or the server's Retry-After). Before a retry that could duplicate an effect
        (the last attempt may have reached the server), ``reconcile`` is asked first; whatever
        it finds is returned instead of sending again.
        """
        httpx = self._httpx
        attempts = self.settings.retries + 1
        maybe_sent = False
        last = ""
        for attempt in range(attempts):
            if attempt and maybe_sent and reconcile is not None:
                found = reconcile()
                if found is not None:
                    return found
            if before_send is not None:
                before_send()
            try:
                response = self._http.request(method, path, json=body, params=params)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                last, wait = one_line(exc, 200), self._backoff(attempt)  # never sent
            except httpx.TransportError as exc:  # read timeout, dropped connection, ...
                last, wait, maybe_sent = one_line(exc, 200), self._backoff(attempt), True
            else:
                status = response.status_code
                if response.is_success:
                    return _decode(response, what)
                if status == 404 and missing_ok:
                    return None
                if status not in RETRY_STATUSES:
                    raise self._error(response, what)
                last = f"HTTP {status}"
                maybe_sent = maybe_sent or status != 429  # a gateway error may hide a success
                wait = _retry_after(response)
                if wait is None:
                    wait = self._backoff(attempt)
                elif wait > MAX_RETRY_AFTER:
                    raise VigilatorError(
                        f"Vigilator asked to wait {wait:.0f}s before {what} again; try again later",
                        status=status,
                    )
            if attempt + 1 < attempts:
                self._sleep(wait)
        if maybe_sent and reconcile is not None:
            found = reconcile()
            if found is not None:
                return found
        raise VigilatorError(
            f"Vigilator at {redact_url(self.settings.base_url)} did not answer {what} after "
            f"{attempts} attempt(s) (last: {last}); try again later"
        )

    def _backoff(self, attempt: int) -> float:
        delay = min(self.settings.retry_base * 2**attempt, MAX_BACKOFF)
        return delay * (0.5 + random.random() / 2)

    def _error(self, response, what: str) -> VigilatorError:
        status = response.status_code
        code, message = _error_body(response)
        detail = self._clean(f"{status} {code}: {message}" if message else f"{status} {code}")
        base = redact_url(self.settings.base_url)
        if status == 401:
            text = (
                f"Vigilator rejected VIGILATOR_API_KEY ({detail}); check that the key is "
                "current and copied whole"
            )
        elif status == 402:
            text = (
                f"Vigilator quota or plan limit reached ({detail}); raise the plan or wait for "
                "the quota to reset, then try again"
            )
        elif status == 403:
            text = (
                f"Vigilator refused {what} ({detail}); the API key's organisation does not "
                "allow it or has reached a limit"
            )
        elif status == 404:
            text = f"Vigilator has nothing at {what} ({detail}); check VIGILATOR_BASE_URL={base}"
        elif status in (400, 422):
            text = f"Vigilator refused {what} as invalid ({detail})"
        else:
            text = f"Vigilator failed {what} ({detail}); try again later"
        return VigilatorError(text, status=status, fatal=status in FATAL_STATUSES)

    def _clean(self, text: str) -> str:
        """One line, bounded, and never the key, even if the server echoes it back."""
        text = " ".join(text.split()).replace(self.settings.api_key, "***")
        return text if len(text) <= 300 else text[:299] + "…"


def _decode(response, what: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise VigilatorError(f"Vigilator answered {what} with a body that is not JSON") from None


def _error_body(response) -> tuple[str, str]:
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return response.reason_phrase or "error", ""
    code = data.get("code") if isinstance(data.get("code"), str) else None
    message = data.get("message") if isinstance(data.get("message"), str) else ""
    return code or response.reason_phrase or "error", message


def _retry_after(response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - time.time())


# -- our request, their wire format ---------------------------------------------------------


def _fit(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_ROLES = {"user": "human", "assistant": "ai", "tool": "tool"}


def to_messages(conversation: list[dict] | None) -> list[dict]:
    """The run's conversation (``role``/``text`` entries) as Vigilator messages, newest 200."""
    out: list[dict] = []
    for entry in conversation or []:
        kind = _ROLES.get(entry.get("role"))
        if kind is None:
            continue
        message: dict[str, Any] = {"type": kind, "content": str(entry.get("text") or "")}
        if entry.get("name"):
            message["name"] = entry["name"]
        if kind == "ai" and entry.get("tool_calls"):
            message["toolCalls"] = [
                {"id": c.get("id"), "name": c.get("name"), "args": c.get("args") or {}}
                for c in entry["tool_calls"]
            ]
        if kind == "tool":
            if entry.get("tool_call_id"):
                message["toolCallId"] = entry["tool_call_id"]
            if entry.get("status") in ("success", "error"):
                message["toolStatus"] = entry["status"]
        out.append(message)
    return out[-MAX_MESSAGES:]


def interrupt_body(
    *,
    external_id: str,
    title: str,
    description: str,
    request: dict,
    args_schemas: dict,
    conversation: list[dict] | None = None,
) -> dict:
    """The ``POST api/interrupts`` body for a HITL request, within Vigilator's limits."""
    actions = request["action_requests"]
    if not 1 <= len(actions) <= MAX_ACTIONS:
        raise UserError(
            f"Vigilator takes 1 to {MAX_ACTIONS} actions per interrupt; "
            f"this pause proposes {len(actions)}"
        )
    title = _fit(title.strip(), TITLE_MAX)
    if len(title) < TITLE_MIN:
        title = _fit(f"Approve {actions[0]['name']}", TITLE_MAX)
    description = _fit(description.strip(), DESCRIPTION_MAX)
    if len(description) < DESCRIPTION_MIN:
        description = title  # LangChain may give no description; Vigilator wants one
    items = []
    for i, action in enumerate(actions):
        item: dict[str, Any] = {
            "name": action["name"],
            "args": action.get("args") or {},
            "allowedDecisions": allowed_decisions(request, i),
        }
        if (action.get("description") or "").strip():
            item["description"] = _fit(action["description"].strip(), DESCRIPTION_MAX)
        if args_schemas.get(action["name"]):
            item["argsSchema"] = args_schemas[action["name"]]
        items.append(item)
    body: dict[str, Any] = {
        "title": title,
        "description": description,
        "externalId": external_id,
        "actionRequests": items,
    }
    messages = to_messages(conversation)
    if messages:
        body["messages"] = messages
    return body


def _fingerprint(record: dict) -> str:
    """What identifies one of our creates among the thread's interrupts: title and actions."""
    actions = [(a.get("name"), a.get("args") or {}) for a in record.get("actionRequests") or []]
    return json.dumps([record.get("title"), actions], sort_keys=True)


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def to_approval(record: dict) -> Approval:
    """A Vigilator interrupt record as an :class:`Approval`; decisions mapped as for webhooks."""
    actions = record.get("actionRequests") or []
    configs: dict[str, dict] = {}
    for a in actions:
        configs.setdefault(
            a["name"],
            {"action_name": a["name"], "allowed_decisions": list(a.get("allowedDecisions") or [])},
        )
    request = {
        "action_requests": [
            {"name": a["name"], "args": a.get("args") or {}, "description": a.get("description")}
            for a in actions
        ],
        "review_configs": list(configs.values()),
    }
    answered = bool(record.get("answered")) and bool(actions)
    answered = answered and all(a.get("decision") for a in actions)
    decisions, by = None, None
    if answered:
        try:
            data = AnsweredData.model_validate(record)
        except ValidationError as exc:
            where = ".".join(str(p) for p in exc.errors()[0]["loc"])
            raise VigilatorError(
                f"Vigilator interrupt {record.get('id')} has an answer we cannot read ({where})"
            ) from None
        decisions, by = to_decisions(data)["decisions"], decided_by(data)
    return Approval(
        id=record["id"],
        external_id=record.get("externalId") or "",
        title=record.get("title") or "",
        description=record.get("description") or "",
        request=request,
        args_schemas={a["name"]: a["argsSchema"] for a in actions if a.get("argsSchema")},
        status="answered" if answered else "pending",
        decisions=decisions,
        decided_by=by,
        created_at=_epoch(record.get("createdAt")) or 0.0,
        answered_at=_epoch(record.get("answeredAt")),
    )


# -- the inbox ------------------------------------------------------------------------------


class VigilatorInbox:
    """Approval requests as Vigilator interrupts; implements :class:`inbox.base.Inbox`."""

    name = "vigilator"

    def __init__(
        self,
        db: Database,
        settings: Settings | None = None,
        *,
        client: Client | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.db = db
        self.settings = settings or Settings.from_env()
        self.clock = clock
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = Client(self.settings)
            return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _send_lease(self) -> float:
        """Long enough for one attempt (the timeout applies to connect, write and read each);
        extended before every attempt. A process that died mid-send blocks others this long."""
        return 3 * self.settings.timeout + 1.0

    def open(
        self,
        *,
        external_id: str,
        dedupe_key: str,
        title: str,
        description: str,
        request: dict,
        args_schemas: dict,
        conversation: list[dict] | None = None,
    ) -> str:
        """Idempotent per ``dedupe_key``: a retried segment (or a retried POST) gets the same
        interrupt back, and Vigilator holds one interrupt per pause."""
        body = interrupt_body(
            external_id=external_id,
            title=title,
            description=description,
            request=request,
            args_schemas=args_schemas,
            conversation=conversation,
        )
        key = {"dedupe_key": dedupe_key}
        self.db.execute(
            INSERT_REQUEST,
            {**key, "external_id": external_id, "body": json.dumps(body), "now": self.clock()},
        )
        deadline = time.monotonic() + 2 * self._send_lease()
        while True:
            row = self.db.one(GET_REQUEST, key)
            if row["interrupt_id"]:
                return row["interrupt_id"]
            now = self.clock()
            taken = {**key, "now": now, "until": now + self._send_lease()}
            if self.db.execute(TAKE_SEND, taken) == 1:
                break
            if time.monotonic() > deadline:
                raise VigilatorError(
                    f"another process is still creating the Vigilator interrupt for "
                    f"{dedupe_key}; try again shortly"
                )
            time.sleep(0.2)
        try:
            # The body recorded first is the one sent, so every retry asks for the same thing.
            return self._create(
                dedupe_key, row["external_id"], json.loads(row["body"]), row["attempts"] > 0
            )
        finally:
            self.db.execute(RELEASE_SEND, key)

    def _create(self, dedupe_key: str, external_id: str, body: dict, uncertain: bool) -> str:
        def reconcile() -> dict | None:
            return self._find_created(external_id, body)

        if uncertain:  # an earlier attempt may have landed: look before sending again
            found = reconcile()
            if found is not None:
                return self._opened(dedupe_key, found["id"])

        def count_attempt() -> None:
            until = self.clock() + self._send_lease()
            self.db.execute(COUNT_ATTEMPT, {"dedupe_key": dedupe_key, "until": until})

        record = self.client.request(
            "POST",
            "api/interrupts",
            what="POST api/interrupts",
            body=body,
            before_send=count_attempt,
            reconcile=reconcile,
        )
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise VigilatorError("Vigilator answered POST api/interrupts without an interrupt id")
        fault("vigilator.created")
        return self._opened(dedupe_key, record["id"])

    def _opened(self, dedupe_key: str, interrupt_id: str) -> str:
        params = {"dedupe_key": dedupe_key, "interrupt_id": interrupt_id, "now": self.clock()}
        if self.db.execute(RECORD_OPENED, params) != 1:
            row = self.db.one(GET_REQUEST, {"dedupe_key": dedupe_key})
            if row and row["interrupt_id"]:
                return row["interrupt_id"]  # recorded by a process that got there first
        return interrupt_id

    def _find_created(self, external_id: str, body: dict) -> dict | None:
        """The interrupt an earlier attempt created for this body, if Vigilator has one.

        Among the thread's interrupts, it is one with the same title and actions that no other
        pause of ours has recorded; the oldest, should a race have made two.
        """
        records = self.client.request(
            "GET",
            LOOKUP,
            what="GET api/interrupts?externalId=...",
            params={"externalId": external_id},
        )
        if isinstance(records, dict):  # tolerate a wrapped list
            records = records.get("data") or records.get("interrupts") or []
        known = {r["interrupt_id"] for r in self.db.all(KNOWN_IDS, {"external_id": external_id})}
        wanted = _fingerprint(body)
        matches = [
            r
            for r in records
            if isinstance(r, dict)
            and r.get("externalId") == external_id
            and isinstance(r.get("id"), str)
            and r["id"] not in known
            and _fingerprint(r) == wanted
        ]
        if not matches:
            return None
        return min(matches, key=lambda r: (_epoch(r.get("createdAt")) or 0.0, r["id"]))

    def get(self, interrupt_id: str) -> Approval | None:
        record = self.client.request(
            "GET",
            f"api/interrupts/{quote(interrupt_id, safe='')}",
            what=f"GET api/interrupts/{interrupt_id}",
            missing_ok=True,
        )
        return None if record is None else to_approval(record)

    def get_many(self, interrupt_ids: list[str]) -> dict[str, Approval]:
        """Fetch in parallel, at most ``VIGILATOR_CONCURRENCY`` requests in flight.

        An interrupt that cannot be read this time is skipped (the next sweep tries again);
        an error every request would share (key, quota, URL) stops the sweep.
        """
        ids = list(dict.fromkeys(i for i in interrupt_ids if i))
        if not ids:
            return {}
        self.client  # noqa: B018 - create the shared client before the threads race for it
        found: dict[str, Approval] = {}
        workers = min(self.settings.concurrency, len(ids))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vigilator") as pool:
            futures = {pool.submit(self.get, i): i for i in ids}
            for future in as_completed(futures):
                try:
                    approval = future.result()
                except VigilatorError as exc:
                    if exc.fatal:
                        pool.shutdown(wait=False, cancel_futures=True)
                        raise
                    log.warning("interrupt %s skipped this sweep: %s", futures[future], exc)
                    continue
                if approval is not None:
                    found[futures[future]] = approval
        return found
