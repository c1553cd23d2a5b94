"""OpenTelemetry traces: off unless configured the standard way, and then one trace per run.

Why here, in ``core``: the log lines (``core.logs``), the receipts of side effects (``store``),
the outgoing deliveries (``inbox``) and the worker all join the same trace, and only ``core``
sits below all of them.

Off (no ``OTEL_EXPORTER_OTLP_ENDPOINT`` nor ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or
``OTEL_SDK_DISABLED=true``): nothing of the SDK is imported and every hook is a no-op (``span``
yields :data:`NULL`), so a process that does not trace pays one environment read. On: the SDK's
tracer provider, which itself reads the standard variables (``OTEL_SERVICE_NAME``,
``OTEL_TRACES_SAMPLER`` and its argument, ``OTEL_BSP_*``, the exporter's headers and timeout),
with a batch processor and the OTLP/HTTP exporter.

A run's trace crosses processes and the hours a person takes to decide as a W3C
``traceparent`` string stored with the run (``store.traces``): every later span of the run,
in whichever process, names it as its parent. A span whose start lies in another process (the
wait for a person) is recorded after the fact with :func:`record`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

from core import settings

# What an attribute may hold once cleaned (OpenTelemetry's own attribute value types).
Value = str | bool | int | float | Sequence[str]

_tracer: Any = None
_provider: Any = None
_configured = False


class _Null:
    """The span every hook gets while tracing is off: accepts everything, records nothing."""

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        return None

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        return None

    def update_name(self, name: str) -> None:
        return None

    def is_recording(self) -> bool:
        return False


NULL = _Null()


def _wanted() -> bool:
    if settings.OTEL_SDK_DISABLED.get() == "true":
        return False
    endpoints = (settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, settings.OTEL_EXPORTER_OTLP_ENDPOINT)
    return any(e.explicit() for e in endpoints)


def configure() -> bool:
    """Turn tracing on in this process if the standard variables ask for it (once per process;
    an installed provider, as in tests, is kept). True when tracing is on."""
    global _configured
    if _configured:
        return _tracer is not None
    _configured = True
    if not _wanted():
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    named = settings.OTEL_SERVICE_NAME.explicit() or "service.name=" in (
        settings.OTEL_RESOURCE_ATTRIBUTES.get() or ""
    )
    attributes: dict[str, Any] = {"process.pid": os.getpid()}
    if not named:
        attributes["service.name"] = "approval-worker"
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    install(provider)
    return True


def install(provider: Any) -> None:
    """Use ``provider`` (an SDK ``TracerProvider``) from now on, whatever the environment says;
    None turns tracing off. Tests install one with the SDK's in-memory exporter."""
    global _provider, _tracer, _configured
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer("approval_worker")
    _configured = True


def enabled() -> bool:
    return _tracer is not None if _configured else configure()


def flush() -> None:
    """Export what is buffered now: a serverless function is frozen once it has answered."""
    if _provider is not None:
        _provider.force_flush()


def clean(attributes: Mapping[str, Any] | None) -> dict[str, Value]:
    """Attributes as OpenTelemetry takes them: no None, money and other objects as text."""
    out: dict[str, Value] = {}
    for key, value in (attributes or {}).items():
        if value is None:
            continue
        if type(value) in (str, bool, int, float):  # an enum member goes as its text, below
            out[key] = value
        elif isinstance(value, list | tuple | set | frozenset):
            out[key] = [str(v) for v in value]
        else:  # Decimal, enums: their text, never a float
            out[key] = str(value)
    return out


def _context(parent: str | None) -> Any:
    """The context a span starts in: the run's stored ``traceparent`` if given, else the
    current one (a request's span; outside any, ``TRACEPARENT`` from the environment, as a
    command started by a traced job gets it)."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if parent is None and not trace.get_current_span().get_span_context().is_valid:
        parent = settings.TRACEPARENT.get()
    if parent is None:
        return None
    return TraceContextTextMapPropagator().extract({"traceparent": parent})


def _ns(at: float | None) -> int | None:
    return None if at is None else int(Decimal(str(at)) * 1_000_000_000)


_KINDS = {"internal": 0, "server": 1, "client": 2}


@contextmanager
def span(
    name: str,
    *,
    parent: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    kind: str = "internal",
    links: Sequence[str] = (),
) -> Iterator[Any]:
    """A span around the block, current inside it (log lines and child spans join it).
    ``parent``: a stored ``traceparent`` to continue; ``links``: others to point at (the
    request a decision came in, which has a trace of its own)."""
    if not enabled():
        yield NULL
        return
    from opentelemetry.trace import Link, SpanKind

    joined = [Link(c) for c in (span_context(t) for t in links) if c is not None]
    with _tracer.start_as_current_span(
        name,
        context=_context(parent),
        kind=SpanKind(_KINDS[kind]),
        attributes=clean(attributes),
        links=joined,
    ) as current:
        yield current


def record(
    name: str,
    *,
    parent: str | None,
    start: float,
    end: float,
    attributes: Mapping[str, Any] | None = None,
) -> None:
    """A span known only once it is over, from epoch seconds: the wait for a person, which
    began in the process that paused the run."""
    if not enabled():
        return
    done = _tracer.start_span(
        name, context=_context(parent), attributes=clean(attributes), start_time=_ns(start)
    )
    done.end(end_time=_ns(max(start, end)))


def span_context(traceparent: str | None) -> Any:
    """The span context a ``traceparent`` names (None if it names none)."""
    if not traceparent or not enabled():
        return None
    from opentelemetry import trace

    found = trace.get_current_span(_context(traceparent)).get_span_context()
    return found if found.is_valid else None


def current() -> str | None:
    """The current span's ``traceparent`` (None outside any span, or while tracing is off)."""
    if not enabled():
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def same_trace(a: str | None, b: str | None) -> bool:
    """Whether two ``traceparent`` strings belong to one trace (``00-<trace>-<span>-<flags>``)."""
    return bool(a and b) and a.split("-")[1:2] == b.split("-")[1:2]  # type: ignore[union-attr]


def log_ids() -> dict[str, str]:
    """The current trace and span ids for a log line; nothing when OpenTelemetry was never
    imported (tracing off costs a dictionary lookup) or no span is current."""
    if "opentelemetry.trace" not in sys.modules:
        return {}
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return {}
    return {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}
