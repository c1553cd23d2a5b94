"""Traces as tests read them: an OTLP/HTTP collector stand-in on 127.0.0.1 that decodes the
protobuf a real exporter sends, the SDK's in-memory exporter installed in this process, and
both turned into one plain shape (:class:`Span`) so a test checks one trace across processes."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from testkit.servers import HOST, serve_http, stop_http


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)
    links: tuple[str, ...] = ()  # the span ids linked to
    events: tuple[tuple[str, dict[str, Any]], ...] = ()
    start_ns: int = 0
    end_ns: int = 0


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def decode(body: bytes) -> list[Span]:
    """The spans of one ``ExportTraceServiceRequest`` (protobuf, as OTLP/HTTP sends it)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(
                    Span(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex() or None,
                        attributes=_attributes(s.attributes),
                        resource=resource,
                        links=tuple(link.span_id.hex() for link in s.links),
                        events=tuple((e.name, _attributes(e.attributes)) for e in s.events),
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                    )
                )
    return spans


class Collector:
    """What the stand-in received: spans, and the raw requests' paths and content types."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def received(self, path: str, content_type: str, body: bytes) -> None:
        spans = decode(body)
        with self.lock:
            self.requests.append((path, content_type))
            self.spans += spans

    def names(self) -> list[str]:
        with self.lock:
            return [s.name for s in self.spans]


@contextmanager
def collector() -> Iterator[tuple[str, Collector]]:
    """An OTLP/HTTP stand-in: yields its endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``) and what it
    received. It answers ``POST /v1/traces`` as a collector does (200, an empty protobuf)."""
    got = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            got.received(self.path, self.headers.get("content-type", ""), body)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = serve_http(0, Handler)
    try:
        yield f"http://{HOST}:{server.server_address[1]}", got
    finally:
        stop_http(server)


def from_sdk(spans: Any) -> list[Span]:
    """The SDK's finished spans (``InMemorySpanExporter.get_finished_spans()``) as :class:`Span`."""
    out = []
    for s in spans:
        ctx = s.get_span_context()
        out.append(
            Span(
                name=s.name,
                trace_id=f"{ctx.trace_id:032x}",
                span_id=f"{ctx.span_id:016x}",
                parent_id=f"{s.parent.span_id:016x}" if s.parent else None,
                attributes=dict(s.attributes or {}),
                resource=dict(s.resource.attributes),
                links=tuple(f"{link.context.span_id:016x}" for link in s.links),
                events=tuple((e.name, dict(e.attributes or {})) for e in s.events),
                start_ns=s.start_time or 0,
                end_ns=s.end_time or 0,
            )
        )
    return out


@contextmanager
def in_memory() -> Iterator[Any]:
    """The SDK with its in-memory exporter as this process's tracing, for one test; tracing is
    off again after it. Yields the exporter."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from core import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.install(None)
        provider.shutdown()
