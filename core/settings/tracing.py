"""The *Tracing* settings: OpenTelemetry's own standard variables, which this product reads to
decide whether to trace at all (``core.tracing``) and which the SDK reads itself. Declared here
like every other setting, so they are checked at start-up, listed in the reference and
``.env.example``, and the exporter's headers are masked in every log line."""

from __future__ import annotations

from core.settings import _declare
from core.settings.kinds import Setting, choice, http_url, text

__all__ = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SDK_DISABLED",
    "TRACEPARENT",
]

TRACING = "Tracing"

OTEL_EXPORTER_OTLP_ENDPOINT: Setting[str | None] = _declare(
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    http_url,
    None,
    TRACING,
    "an OTLP/HTTP collector (`/v1/traces` is appended): set, every process traces its runs; "
    "unset, tracing is off and costs nothing",
    example="http://127.0.0.1:4318",
)
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Setting[str | None] = _declare(
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    http_url,
    None,
    TRACING,
    "the full traces URL instead (turns tracing on too)",
    example="http://127.0.0.1:4318/v1/traces",
)
OTEL_EXPORTER_OTLP_HEADERS: Setting[str | None] = _declare(
    "OTEL_EXPORTER_OTLP_HEADERS",
    text,
    None,
    TRACING,
    "`key=value,...` headers the exporter sends (a collector's API key): never logged",
    example="authorization=Bearer change-me",
    sensitive=True,
)
OTEL_SERVICE_NAME: Setting[str | None] = _declare(
    "OTEL_SERVICE_NAME",
    text,
    None,
    TRACING,
    "`service.name` of this process's spans",
    shown="`approval-worker`",
    example="approval-worker",
)
OTEL_RESOURCE_ATTRIBUTES: Setting[str | None] = _declare(
    "OTEL_RESOURCE_ATTRIBUTES",
    text,
    None,
    TRACING,
    "`key=value,...` attributes of every span's resource (`deployment.environment=prod`)",
    example="deployment.environment=prod",
)
OTEL_TRACES_SAMPLER: Setting[str | None] = _declare(
    "OTEL_TRACES_SAMPLER",
    choice(
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    ),
    None,
    TRACING,
    "which runs are traced; a parent-based sampler keeps a run's decision for all its spans",
    shown="`parentbased_always_on`",
    example="parentbased_traceidratio",
)
OTEL_TRACES_SAMPLER_ARG: Setting[str | None] = _declare(
    "OTEL_TRACES_SAMPLER_ARG",
    text,
    None,
    TRACING,
    "the ratio sampler's fraction of runs traced",
    example="0.1",
)
OTEL_SDK_DISABLED = _declare(
    "OTEL_SDK_DISABLED",
    choice("true", "false"),
    "false",
    TRACING,
    "`true`: no tracing, whatever else is set",
)
TRACEPARENT: Setting[str | None] = _declare(
    "TRACEPARENT",
    text,
    None,
    TRACING,
    "a W3C `traceparent` a command (`approval-worker run`) continues, as a traced job passes it",
    example="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
)
