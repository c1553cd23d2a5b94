"""The *Operations* settings (``ops/``): notifications, metrics, logs, readiness, retention.

Declared through :func:`core.settings._declare` like every other setting, so they are in
:data:`core.settings.SETTINGS` (checked at start-up, in the README table and ``.env.example``);
kept in their own module only to keep ``core/settings/__init__.py`` short.
"""

from __future__ import annotations

from core.settings import _declare
from core.settings.kinds import (
    Invalid,
    Setting,
    choice,
    duration,
    http_url,
    integer,
    number,
    secret,
    text,
)

__all__ = [
    "NOTIFY_URLS",
    "NOTIFY_FORMAT",
    "NOTIFY_SECRET",
    "PUBLIC_URL",
    "DISPLAY_TIMEZONE",
    "METRICS_TOKEN",
    "PROMETHEUS_MULTIPROC_DIR",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "DATABASE_POOL_TIMEOUT",
    "DATABASE_STATEMENT_TIMEOUT",
    "RETAIN_CHECKPOINTS_FOR",
    "RETAIN_RUNS_FOR",
    "PRUNE_BATCH",
    "RESUME_THREADS",
    "RESUME_PROCESSES",
    "RESUME_POLL_SECONDS",
    "SHUTDOWN_SECONDS",
    "HEARTBEAT_FILE",
    "SECRETS_DIR",
]

OPS = "Operations"


def whsec(raw: str) -> str:
    """One ``whsec_<base64>`` key of at least 16 bytes (standardwebhooks accepts shorter ones
    and silently drops a second key, so check here)."""
    import base64
    import binascii

    try:
        key = base64.b64decode(raw.strip().removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not raw.startswith("whsec_") or len(key) < 16:
        raise Invalid("must be one whsec_<base64> secret of at least 16 bytes")
    return raw.strip()


def time_zone(raw: str) -> str:
    """An IANA time zone name (``Europe/Berlin``) the system's zone database knows."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    name = raw.strip()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise Invalid("must be an IANA time zone name, like Europe/Berlin or UTC") from None
    return name


def http_urls(raw: str) -> str:
    """Space-separated http(s) URLs, each checked like a single URL setting."""
    for url in raw.split():
        http_url(url)
    return raw


NOTIFY_URLS: Setting[str | None] = _declare(
    "NOTIFY_URLS",
    http_urls,
    None,
    OPS,
    "space-separated URLs that get lifecycle notifications (approval requested, reminder, "
    "escalated, expired; run done, failed, cancelled) through the outbox",
    example="https://hooks.example.com/approvals",
)
NOTIFY_FORMAT = _declare(
    "NOTIFY_FORMAT",
    choice("standard", "slack"),
    "standard",
    OPS,
    '`standard`: a JSON event signed per Standard Webhooks; `slack`: `{"text": ...}` for a '
    "Slack incoming webhook",
)
NOTIFY_SECRET: Setting[str | None] = _declare(
    "NOTIFY_SECRET",
    whsec,
    None,
    OPS,
    "`whsec_...` secret that signs notifications (`webhook-signature`); unset: unsigned",
    example="whsec_replace-with-a-generated-secret",
    sensitive=True,
)
PUBLIC_URL: Setting[str | None] = _declare(
    "PUBLIC_URL",
    http_url,
    None,
    OPS,
    "where reviewers reach this app; notifications link `<PUBLIC_URL>/inbox/requests/<id>`",
    example="https://approvals.example.com",
)
DISPLAY_TIMEZONE: Setting[str] = _declare(
    "DISPLAY_TIMEZONE",
    time_zone,
    "UTC",
    OPS,
    "IANA time zone that deadlines and decision times are written in where the reader's own "
    "is unknown: e-mails, refusals, the pages before their script runs (Slack shows each "
    "viewer their own)",
    example="Europe/Berlin",
)
METRICS_TOKEN: Setting[str | None] = _declare(
    "METRICS_TOKEN",
    secret,
    None,
    OPS,
    "bearer token a scraper sends to `/metrics`; unset: `/metrics` answers 404",
    example="change-me-metrics-token",
    sensitive=True,
)
PROMETHEUS_MULTIPROC_DIR: Setting[str | None] = _declare(
    "PROMETHEUS_MULTIPROC_DIR",
    text,
    None,
    OPS,
    "an empty directory shared by every worker process (uvicorn `--workers N`, `recover.py`): "
    "prometheus-client's multiprocess mode, so `/metrics` reports totals; empty it at deploy",
    example="/var/run/approval-worker/metrics",
)
LOG_FORMAT = _declare(
    "LOG_FORMAT", choice("text", "json"), "text", OPS, "`json`: one JSON object per log line"
)
LOG_LEVEL: Setting[str | None] = _declare(
    "LOG_LEVEL",
    choice("DEBUG", "INFO", "WARNING", "ERROR"),
    None,
    OPS,
    "the least severe level logged",
    shown="`INFO` in the app, `WARNING` in commands (their stdout is the report)",
    example="INFO",
)
DATABASE_POOL_TIMEOUT = _declare(
    "DATABASE_POOL_TIMEOUT",
    number(0.1, 600),
    "2.5",
    OPS,
    "seconds a request waits for a Postgres connection, and for an answer from it, before "
    "answering 503 (a connection that gives none in time is cut: a network black hole)",
)
DATABASE_STATEMENT_TIMEOUT = _declare(
    "DATABASE_STATEMENT_TIMEOUT",
    number(0.1, 86400),
    "30",
    OPS,
    "Postgres `statement_timeout` set on every connection (not with `DATABASE_POOLER=transaction`:"
    " set it on the role there)",
)
RETAIN_CHECKPOINTS_FOR = _declare(
    "RETAIN_CHECKPOINTS_FOR",
    duration,
    "7d",
    OPS,
    "how long checkpoints of finished runs are kept (the run row and its trail stay)",
)
RETAIN_RUNS_FOR = _declare(
    "RETAIN_RUNS_FOR",
    duration,
    "400d",
    OPS,
    "how long finished runs, their events, receipts, ledger and inbox rows are kept",
)
PRUNE_BATCH = _declare(
    "PRUNE_BATCH", integer(1, 100000), "200", OPS, "most runs one sweep prunes per step"
)
RESUME_THREADS = _declare(
    "RESUME_THREADS",
    integer(1, 64),
    "2",
    OPS,
    "threads that resume decided runs after the answer, apart from the ones answering "
    "requests: in each resumer process (`RESUME_PROCESSES`), else in the app process (not used "
    "in serverless mode, where the resume is inline)",
)
RESUME_PROCESSES: Setting[int | None] = _declare(
    "RESUME_PROCESSES",
    integer(0, 16),
    None,
    OPS,
    "processes per app process (each uvicorn worker) that run the resumes after the answer, so "
    "acknowledgements never share an interpreter with them; `0`: threads of the app process",
    shown="`1` on Postgres, `0` on SQLite; always `0` in serverless mode",
    example="1",
)
RESUME_POLL_SECONDS = _declare(
    "RESUME_POLL_SECONDS",
    number(0.05, 60),
    "2",
    OPS,
    "how often a resumer looks for queued runs without being woken (Postgres wakes it at once "
    "with `LISTEN/NOTIFY`, an app on SQLite with its own decisions)",
)
SHUTDOWN_SECONDS = _declare(
    "SHUTDOWN_SECONDS",
    number(1, 3600),
    "20",
    OPS,
    "on SIGTERM, how long requests, resumes and a sweep's current run get to finish (long-polls "
    "end at once); runs still going are then handed back (lease released: another process takes "
    "them at once) and the process exits. Keep it below the platform's grace period",
)
HEARTBEAT_FILE: Setting[str | None] = _declare(
    "HEARTBEAT_FILE",
    text,
    None,
    OPS,
    "a file `recover --forever` touches after every pass (a liveness probe checks its age)",
    example="/tmp/sweeper.alive",
)
SECRETS_DIR: Setting[str | None] = _declare(
    "SECRETS_DIR",
    text,
    None,
    OPS,
    "a directory of file-mounted secrets (Kubernetes or Docker secrets): a file named like a "
    "setting sets it when the environment does not",
    example="/run/secrets",
)
