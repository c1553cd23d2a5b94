"""Per-request context for the HTTP app: an ``X-Request-ID`` taken from the caller (if sane) or
made here, returned on every response, set in the log context for the request's lines, and one
access log line per request (``ops.access``) with method, path, status and duration."""

from __future__ import annotations

import logging
import re
import time
import uuid
from contextlib import nullcontext
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core import tracing
from core.logs import request_id, thread_id
from ops import metrics

log = logging.getLogger("ops.access")

_SANE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")  # never echo arbitrary bytes into logs
_RUN_PATH = re.compile(r"^/runs/([A-Za-z0-9._:\-]{1,160})")  # a run id: api.models.RUN_ID


class RequestContext:
    """Pure ASGI middleware (no body buffering, so streaming and the body limit still work)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        rid = given if _SANE.match(given) else uuid.uuid4().hex
        token = request_id.set(rid)
        run = _RUN_PATH.match(scope.get("path", ""))
        thread_token = thread_id.set(run.group(1) if run else None)
        status = 500
        started = time.perf_counter()
        logged = False

        def access() -> None:
            """The access line, once: when the response's last byte is sent (a background
            task after it, such as a resume, is not the request's time), or at the end."""
            nonlocal logged
            if logged:
                return
            logged = True
            path = scope.get("path", "")
            if path.startswith("/webhooks"):
                metrics.delivery("in", str(status))
            log.info(
                "%s %s %s",
                scope.get("method"),
                path,
                status,
                extra={
                    "method": scope.get("method"),
                    "path": path,
                    "status": status,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                },
            )

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", rid.encode())]}
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                access()

        try:
            with _server_span(scope) as server:
                await self.app(scope, receive, send_with_id)
                server.set_attribute("http.response.status_code", status)
                _routed(server, scope)
        finally:
            access()
            thread_id.reset(thread_token)
            request_id.reset(token)


_PROBES = {"/healthz", "/readyz", "/metrics"}  # polled all day: no trace of their own


def _server_span(scope: Scope) -> Any:
    """The request's span, continuing the caller's ``traceparent`` if it sent one (a run it
    starts stores this trace); a no-op while tracing is off. Named by method and the path's
    first segment, which stays few (ids are in ``url.path``)."""
    if not tracing.enabled() or scope.get("path") in _PROBES:
        return nullcontext(tracing.NULL)
    given = dict(scope.get("headers") or []).get(b"traceparent", b"").decode("latin-1")
    method, path = scope.get("method", ""), scope.get("path", "")
    attributes = {"http.request.method": method, "url.path": path}
    name = f"{method} /{path.strip('/').split('/')[0]}"
    return tracing.span(name, parent=given or None, kind="server", attributes=attributes)


def _routed(server: Any, scope: Scope) -> None:
    """Once routed, the span is named as OpenTelemetry's HTTP conventions name a server span,
    by method and route template (``POST /runs/{thread_id}/decision``: few names, no ids),
    with ``http.route``; what no route matched keeps its first path segment."""
    route = getattr(scope.get("route"), "path", None)
    if isinstance(route, str) and server.is_recording():
        server.set_attribute("http.route", route)
        server.update_name(f"{scope.get('method', '')} {route}")
