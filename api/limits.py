"""Bounds on request bodies: uvicorn and Starlette accept bodies of any size and Python's JSON
accepts ``NaN`` and any depth, so both are enforced here, before a route runs."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_body
from core.errors import UserError
from core.limits import parse_json

MAX_BODY_BYTES = 1024 * 1024


class BodyTooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware: 413 from Content-Length up front, or as soon as a chunked body passes
    the limit; the body is never read whole."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._reject(send)
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge
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
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        payload = error_body("too_large", f"body larger than {self.limit} bytes")
        await _send_json(send, 413, payload, [(b"connection", b"close")])


class StrictJson:
    """ASGI middleware: a JSON body must be strict JSON (no ``NaN``/``Infinity``), shallow and
    valid text before any route sees it; else 422 in the one error shape. Signed webhooks are
    checked by their route after the signature (a body is only parsed once it is verified); the
    web inbox's pages post HTML forms, not JSON, and so does Slack (checked after its signature)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        if scope.get("path", "").startswith(("/webhooks/", "/inbox/", "/slack/")):
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
