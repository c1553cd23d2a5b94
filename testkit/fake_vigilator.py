"""A local stand-in for Vigilator's API on 127.0.0.1, so the real client code runs against real
HTTP: ``POST api/interrupts``, ``GET api/interrupts/{id}`` and ``?externalId=`` lookups, with
``x-api-key``, the documented limits (``testkit.vigilator_wire``) and Vigilator's error body. It
can be told to fail (transient statuses, a delay, a create that lands but answers late or drops
the connection), and ``answer()``/``escalate()`` play the reviewer, sending the Svix-signed event
to a webhook URL. A threaded stdlib server (not uvicorn), so a test can drop a connection.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from testkit import loopback
from testkit.servers import serve_http, stop_http
from testkit.vigilator_wire import ValidationFailed, error_body, now_iso, validate_create

API_KEY = "vk_test_" + "k3y" * 8


@dataclass
class Fault:
    """What to do to the next request(s) matching ``method`` (and ``path`` prefix)."""

    method: str | None
    path: str
    status: int | None = None  # answer this status (no effect)
    code: str = "SERVICE_UNAVAILABLE"
    message: str = "try again"
    data: Any = None
    retry_after: str | None = None
    late: float | None = None  # do the work, then wait this long before answering
    drop: bool = False  # do the work, then close the connection without answering
    times: int = 1

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and path.startswith(self.path)


@dataclass
class Stats:
    requests: list[tuple[str, str]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # the x-api-key of each request, in order
    in_flight: int = 0
    max_in_flight: int = 0

    def count(self, method: str, prefix: str = "/api/interrupts") -> int:
        return sum(1 for m, p in self.requests if m == method and p.startswith(prefix))


class FakeVigilator:
    """Start with :meth:`start` (or as a context manager); ``url`` is the base URL."""

    def __init__(
        self,
        api_key: str = API_KEY,
        *,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
    ):
        self.api_key = api_key
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret
        self.delay = 0.0  # added to every request
        self.interrupts: dict[str, dict] = {}
        self.stats = Stats()
        self.sent: list[dict] = []  # every event sent to the webhook
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeVigilator:
        fake = self

        class Handler(_Handler):
            vigilator = fake

        self._server = serve_http(0, Handler, _Server)
        return self

    def stop(self) -> None:
        if self._server is not None:
            stop_http(self._server)

    def __enter__(self) -> FakeVigilator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/"

    def reset(self) -> None:
        with self._lock:
            self.interrupts.clear()
            self._faults.clear()
            self.stats = Stats()
            self.delay = 0.0

    # -- failures -------------------------------------------------------------------------

    def fail_next(self, status: int = 503, *, method: str | None = None, path: str = "/", **kw):
        """The next ``times`` matching requests answer ``status`` with an error body."""
        self._faults.append(Fault(method, path, status=status, **kw))

    def late_next(self, seconds: float, *, method: str = "POST", path: str = "/api/interrupts"):
        """The next matching request does its work, then answers ``seconds`` late."""
        self._faults.append(Fault(method, path, late=seconds))

    def drop_next(self, *, method: str = "POST", path: str = "/api/interrupts"):
        """The next matching request does its work, then closes the connection unanswered."""
        self._faults.append(Fault(method, path, drop=True))

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    # -- the API --------------------------------------------------------------------------

    def create(self, body: dict) -> dict:
        """What ``POST api/interrupts`` does (also used to seed many interrupts quickly)."""
        at = now_iso()
        interrupt_id = str(uuid.uuid4())
        record = {
            "id": interrupt_id,
            "timeOpened": at,
            "createdAt": at,
            "updatedAt": at,
            "organizationId": "org_test",
            "externalId": body.get("externalId"),
            "title": body["title"],
            "answered": False,
            "answeredAt": None,
            "description": body["description"],
            "escalated": False,
            "assigneeId": None,
            "assignee": None,
            "classificationId": body.get("classificationId"),
            "classification": None,
            "argusSummary": None,
            "argusSuggestedDecision": None,
            "argusSuggestedResponse": None,
            "messages": [
                {
                    "id": str(uuid.uuid4()),
                    "createdAt": at,
                    "interruptId": interrupt_id,
                    "sessionId": None,
                    "name": None,
                    "toolCallId": None,
                    "toolStatus": None,
                    **m,
                }
                for m in body.get("messages", [])
            ],
            "actionRequests": [
                {
                    "id": str(uuid.uuid4()),
                    "createdAt": at,
                    "interruptId": interrupt_id,
                    "name": a["name"],
                    "args": a.get("args"),
                    "description": a.get("description"),
                    "allowedDecisions": a["allowedDecisions"],
                    "argsSchema": a.get("argsSchema"),
                    "decision": None,
                    "editedArgs": None,
                    "responseText": None,
                    "decidedAt": None,
                    "decidedByName": None,
                }
                for a in body["actionRequests"]
            ],
            "auditEvents": [],
        }
        with self._lock:
            self.interrupts[interrupt_id] = record
        return record

    def by_external_id(self, external_id: str) -> list[dict]:
        with self._lock:
            found = [r for r in self.interrupts.values() if r["externalId"] == external_id]
        return sorted(found, key=lambda r: r["createdAt"])

    # -- the reviewer ---------------------------------------------------------------------

    def answer(
        self,
        interrupt_id: str,
        decisions: list[dict] | None = None,
        *,
        by: str = "alice",
        deliver: bool = True,
    ) -> httpx.Response | None:
        """Decide every action (``{"decision": "approve"}``, ``{"decision": "edit",
        "editedArgs": {...}}``, ``{"decision": "reject", "responseText": ...}``; default:
        approve all), then send the signed ``interrupt.answered`` event unless ``deliver`` is
        False (a lost webhook)."""
        at = now_iso()
        with self._lock:
            record = self.interrupts[interrupt_id]
            actions = record["actionRequests"]
            decisions = decisions or [{"decision": "approve"} for _ in actions]
            assert len(decisions) == len(actions), "one decision per action request"
            for action, decision in zip(actions, decisions, strict=True):
                assert decision["decision"] in action["allowedDecisions"], decision
                action.update(
                    decision=decision["decision"],
                    editedArgs=decision.get("editedArgs"),
                    responseText=decision.get("responseText"),
                    decidedAt=at,
                    decidedByName=by,
                )
            record.update(answered=True, answeredAt=at, updatedAt=at)
            record["auditEvents"].append(self._audit(record, "decided", by))
            items = [
                {
                    "name": a["name"],
                    "decision": a["decision"],
                    "decidedByName": a["decidedByName"],
                    "editedArgs": a["editedArgs"],
                    "responseText": a["responseText"],
                }
                for a in actions
            ]
            event = {
                "type": "interrupt.answered",
                "timestamp": at,
                "data": {
                    "id": record["id"],
                    "externalId": record["externalId"],
                    "status": "answered",
                    "title": record["title"],
                    "answered": True,
                    "answeredAt": at,
                    "actionRequests": items,
                },
            }
        return self.send(event) if deliver else None

    def escalate(self, interrupt_id: str, *, deliver: bool = True) -> httpx.Response | None:
        """Raise the interrupt to the manager queue and send ``interrupt.escalated``."""
        at = now_iso()
        with self._lock:
            record = self.interrupts[interrupt_id]
            record.update(escalated=True, updatedAt=at)
            record["auditEvents"].append(self._audit(record, "escalated", None))
            event = {
                "type": "interrupt.escalated",
                "timestamp": at,
                "data": {
                    "id": record["id"],
                    "externalId": record["externalId"],
                    "title": record["title"],
                    "escalated": True,
                },
            }
        return self.send(event) if deliver else None

    @staticmethod
    def _audit(record: dict, kind: str, actor: str | None) -> dict:
        return {
            "id": str(uuid.uuid4()),
            "createdAt": now_iso(),
            "interruptId": record["id"],
            "type": kind,
            "actorName": actor,
            "assigneeName": None,
            "classificationName": None,
            "classificationColor": None,
            "decision": None,
            "actionName": None,
        }

    def send(self, event: dict) -> httpx.Response:
        """Deliver ``event`` as Svix would: signed body, svix-id/-timestamp/-signature."""
        from svix.webhooks import Webhook

        assert self.webhook_url and self.webhook_secret, "no webhook configured"
        self.sent.append(event)
        body = json.dumps(event)
        msg_id = "msg_" + uuid.uuid4().hex
        at = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "svix-id": msg_id,
            "svix-timestamp": str(int(at.timestamp())),
            "svix-signature": Webhook(self.webhook_secret).sign(msg_id, at, body),
        }
        return loopback.post(self.webhook_url, content=body, headers=headers, timeout=30)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a sweep opens VIGILATOR_CONCURRENCY connections at once


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real API behind a proxy would
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stalls
    vigilator: FakeVigilator

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        fake = self.vigilator
        parts = urlsplit(self.path)
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        with fake._lock:
            fake.stats.requests.append((method, parts.path))
            fake.stats.keys.append(self.headers.get("x-api-key") or "")
            fake.stats.in_flight += 1
            fake.stats.max_in_flight = max(fake.stats.max_in_flight, fake.stats.in_flight)
        try:
            if fake.delay:
                time.sleep(fake.delay)  # a slow API's latency, as a test asks (not a wait)
            self._route(fake, method, parts, raw)
        finally:
            with fake._lock:
                fake.stats.in_flight -= 1

    def _route(self, fake: FakeVigilator, method: str, parts, raw: bytes) -> None:
        if self.headers.get("x-api-key") != fake.api_key:
            return self._json(401, error_body(401, "UNAUTHORIZED", "Invalid or missing API key"))
        fault = fake._take_fault(method, parts.path)
        if fault is not None and fault.status is not None:
            headers = {"retry-after": fault.retry_after} if fault.retry_after else {}
            body = error_body(fault.status, fault.code, fault.message, fault.data)
            return self._json(fault.status, body, headers)
        path = parts.path.rstrip("/")
        if method == "POST" and path == "/api/interrupts":
            try:
                body = json.loads(raw or b"null")
                validate_create(body)
            except (ValueError, ValidationFailed) as exc:
                return self._json(400, error_body(400, "BAD_REQUEST", str(exc)))
            status, payload = 200, fake.create(body)
        elif method == "GET" and path == "/api/interrupts":
            external = parse_qs(parts.query).get("externalId", [None])[0]
            with fake._lock:
                records = list(fake.interrupts.values())
            status = 200
            payload = [r for r in records if external is None or r["externalId"] == external]
        elif method == "GET" and path.startswith("/api/interrupts/"):
            with fake._lock:
                record = fake.interrupts.get(path.rsplit("/", 1)[1])
            if record is None:
                return self._json(404, error_body(404, "NOT_FOUND", "Interrupt not found"))
            status, payload = 200, record
        else:
            return self._json(404, error_body(404, "NOT_FOUND", "No such route"))
        if fault is not None and fault.drop:
            self.close_connection = True
            self.connection.shutdown(2)  # the work is done; the answer never comes
            return None
        if fault is not None and fault.late:
            time.sleep(fault.late)  # a late answer, as a fault asks (not a wait)
        return self._json(status, payload)

    def _json(self, status: int, payload: Any, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            self.close_connection = True
