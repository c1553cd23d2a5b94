"""Bounds on request bodies: uvicorn and Starlette accept bodies of any size and Python's JSON
accepts ``NaN`` and any depth, so both are enforced here, before a route runs. The caller is
authenticated before a byte of an API body is read, a page form is capped lower than an API
body, a process holds at most ``MAX_BODY_BYTES_IN_FLIGHT`` of bodies at once (counted as they
arrive: a declared length costs nothing until it is sent) and a body must arrive within
``BODY_READ_SECONDS`` (the headers' deadline is the server's: ``api.server``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import ApiError, error_body
from core import settings
from core.errors import UserError
from core.limits import parse_json

MAX_BODY_BYTES = 1024 * 1024
MAX_FORM_BYTES = 256 * 1024  # the web inbox's forms: a sign-in, a decision, a reason
BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")
PRINCIPAL = "aw.principal"  # where AuthFirst leaves the caller for the route's role check
# Paths whose bodies are read without a bearer credential: signed webhooks (the signature
# covers the body; Slack signs its interactions) and the web inbox (a session cookie, or the
# sign-in form itself); and exactly one path besides, an e-mail link's confirmation form (the
# signed token in its body is the credential: ``api/mail.py``).
_OWN_AUTH = ("/webhooks/", "/inbox/", "/slack/")
_TOKEN_FORMS = frozenset({"/email/decide"})


def own_auth(path: str) -> bool:
    """Whether the route at ``path`` authenticates its caller itself, from the body."""
    return path.startswith(_OWN_AUTH) or path in _TOKEN_FORMS


def html_form(path: str) -> bool:
    """A page's form (a smaller body, not JSON): the web inbox, an e-mail link's page."""
    return path.startswith("/inbox/") or path in _TOKEN_FORMS


MAX_PATH_CHARS = 2048
MAX_QUERY_BYTES = 8192


class CleanUrl:
    """ASGI middleware: no NUL and no unbounded size in a path or query string, whatever route
    reads them (Postgres refuses NUL in text; a route would answer 500). A path with NUL names
    nothing (404); a query with one is refused (422); too long is 414."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path: str = scope.get("path", "")
        query: bytes = scope.get("query_string", b"")
        if len(path) > MAX_PATH_CHARS or len(query) > MAX_QUERY_BYTES:
            return await _send_json(send, 414, error_body("too_long", "the URL is too long"))
        if "\x00" in path:
            return await _send_json(send, 404, error_body("not_found", "Not Found"))
        if b"\x00" in query or b"%00" in query.lower():
            payload = error_body("invalid", "the query string contains a NUL character")
            return await _send_json(send, 422, payload)
        await self.app(scope, receive, send)


class AuthFirst:
    """ASGI middleware: an API request with a body must carry a valid credential, checked
    before any of the body is read; otherwise 401 at once (the body is never received)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            return await self.app(scope, receive, send)
        if own_auth(path):
            return await self.app(scope, receive, send)
        auth: Any = getattr(scope["app"].state, "auth", None)
        if auth is None:  # not started: the route answers as it would
            return await self.app(scope, receive, send)
        try:
            principal = await run_in_threadpool(auth.principal, Request(scope))
        except ApiError as exc:
            headers = [(k.lower().encode(), v.encode()) for k, v in (exc.headers or {}).items()]
            return await _send_json(send, exc.status, error_body(exc.code, exc.message), headers)
        except Exception as exc:
            from api.ops import is_outage

            if not is_outage(exc):
                raise
            payload = error_body("unavailable", "the database is unavailable; retry later")
            return await _send_json(send, 503, payload)
        scope[PRINCIPAL] = principal
        await self.app(scope, receive, send)


class BodyTooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware: 413 from Content-Length up front, or as soon as a chunked body passes
    the limit; the body is never read whole. 503 once the process holds more than
    ``MAX_BODY_BYTES_IN_FLIGHT`` of bodies, counted on the bytes received: 33 clients that
    declare a megabyte each and send nothing must not refuse everyone else. 408 when the body
    has not all arrived ``BODY_READ_SECONDS`` after the headers."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0  # one app per process; the event loop is its one thread

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = MAX_FORM_BYTES if html_form(scope.get("path", "")) else self.limit
        declared = dict(scope.get("headers") or []).get(b"content-length")
        size = int(declared) if declared is not None and declared.isdigit() else None
        if size is not None and size > limit:
            return await self._reject(send, limit)
        cap = settings.MAX_BODY_BYTES_IN_FLIGHT.get()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.BODY_READ_SECONDS.get()
        held = 0
        complete = False
        started = False

        async def counting_receive() -> Message:
            nonlocal held, complete
            if complete:  # the body is in: what comes next is a disconnect, whenever it does
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise BodyTimeout from None
            if message["type"] == "http.request":
                complete = not message.get("more_body", False)
                chunk = len(message.get("body", b""))
                held += chunk
                self.in_flight += chunk  # given back in full when the request ends
                if held > limit:
                    raise BodyTooLarge
                if chunk and self.in_flight > cap:
                    raise Busy
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._reject(send, limit)
        except Busy:
            if not started:
                await self._busy(send)
        except BodyTimeout:
            if not started:
                payload = error_body("timeout", "the request body did not arrive in time")
                await _send_json(send, 408, payload, [(b"connection", b"close")])
        finally:
            self.in_flight -= held

    async def _reject(self, send: Send, limit: int) -> None:
        payload = error_body("too_large", f"body larger than {limit} bytes")
        await _send_json(send, 413, payload, [(b"connection", b"close")])

    async def _busy(self, send: Send) -> None:
        payload = error_body("busy", "the server holds too many request bodies; retry shortly")
        await _send_json(send, 503, payload, [(b"retry-after", b"1"), (b"connection", b"close")])


class Busy(Exception):
    pass


class BodyTimeout(Exception):
    pass


class StrictJson:
    """ASGI middleware: a JSON body must be strict JSON (no ``NaN``/``Infinity``), shallow and
    valid text before any route sees it; else 422 in the one error shape. Signed webhooks are
    checked by their route after the signature (a body is only parsed once it is verified); the
    web inbox's pages and an e-mail link's page post HTML forms, not JSON, and so does Slack
    (checked after its signature)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        if own_auth(scope.get("path", "")):
            return await self.app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, receive, send)  # disconnected
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        if body.strip():
            try:
                parse_json(body)
            except UserError as exc:
                return await _send_json(send, 422, error_body("invalid", str(exc)))
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _send_json(
    send: Send, status: int, payload: dict, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send(
        {"type": "http.response.start", "status": status, "headers": headers + (extra or [])}
    )
    await send({"type": "http.response.body", "body": body})
