"""Every environment variable the worker reads, declared once: name, type, default, meaning.

:mod:`core.settings.model` turns the declarations into one pydantic-settings model (each
setting's parser as its check, ``SecretStr`` for secrets, file-mounted secrets from
``SECRETS_DIR``) that start-up loads and checks. A setting is read where it is used
(``LEASE_SECONDS.get()``), so a test that changes the environment sees the change; :func:`check`
validates them all at start-up, so a typo stops a process with one ``error: NAME ...`` line
before anything is written. The README's Settings table and ``.env.example`` are generated from
:data:`SETTINGS` by :mod:`core.settings.docs` (``python -m core.settings --write``) and a test
fails when they drift.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from core.errors import UserError
from core.settings.kinds import (
    Invalid,
    Setting,
    T,
    amount,
    choice,
    duration,
    flag,
    fraction,
    http_url,
    integer,
    number,
    parse_duration,
    postgres_url,
    secret,
    text,
    webhook_secrets,
)

__all__ = ["Invalid", "Setting", "parse_duration"]

STORAGE, RUNS, INBOX_G, WEBHOOKS, MODEL, POLICY, TESTS = (
    "Storage",
    "Runs",
    "Inbox",
    "Webhooks",
    "Model",
    "Approval policy",
    "Tests",
)


SETTINGS: list[Setting[Any]] = []


def _declare(
    name: str, parse: Callable[[str], T], default: str | None, group: str, meaning: str, **kw: Any
) -> Setting[T]:
    setting = Setting(name, parse, default, meaning, group, **kw)
    SETTINGS.append(setting)
    return setting


DATABASE_URL: Setting[str | None] = _declare(
    "DATABASE_URL",
    postgres_url,
    None,
    STORAGE,
    "`postgresql://...`: Postgres for the checkpointer and every table; unset: SQLite",
    example="postgresql://app:change-me@127.0.0.1:5432/approvals",
    sensitive=True,
)
SQLITE_PATH = _declare(
    "SQLITE_PATH", text, "approvals.db", STORAGE, "the SQLite file (checkpoints and tables)"
)
DATABASE_CONNECT_TIMEOUT = _declare(
    "DATABASE_CONNECT_TIMEOUT",
    number(0.1, 600),
    "5",
    STORAGE,
    "seconds to wait for Postgres at start-up",
)
DATABASE_POOL_SIZE = _declare(
    "DATABASE_POOL_SIZE", integer(1, 1000), "10", STORAGE, "most Postgres connections per process"
)
APP_NAME = _declare(
    "APP_NAME",
    text,
    "approval-worker",
    RUNS,
    "prefix of every external id, `<APP_NAME>:<thread_id>`; other apps' decisions are ignored",
)
LEASE_SECONDS = _declare(
    "LEASE_SECONDS",
    number(0, 86400),
    "300",
    RUNS,
    "how long a claim is owned without renewal before a sweeper takes it over",
)
RETRY_BASE_SECONDS = _declare(
    "RETRY_BASE_SECONDS",
    number(0),
    "30",
    RUNS,
    "first backoff of `recover.py --retry-failed` (doubles per attempt)",
)
RETRY_MAX_ATTEMPTS = _declare(
    "RETRY_MAX_ATTEMPTS",
    integer(1),
    "5",
    RUNS,
    "attempts after which only `--retry THREAD_ID` retries a run",
)
INBOX = _declare(
    "INBOX",
    choice("local", "vigilator"),
    "local",
    INBOX_G,
    "where approval requests go: `local` or `vigilator`",
)
VIGILATOR_API_KEY: Setting[str | None] = _declare(
    "VIGILATOR_API_KEY",
    secret,
    None,
    INBOX_G,
    "Vigilator API key; required with `INBOX=vigilator` (sent as `x-api-key`, never logged)",
    example="vig_your-key-here",
    sensitive=True,
)
VIGILATOR_BASE_URL = _declare(
    "VIGILATOR_BASE_URL",
    http_url,
    "https://api.vigilator.dev",
    INBOX_G,
    "Vigilator's API (the default of Vigilator's Python SDK)",
)
VIGILATOR_TIMEOUT = _declare(
    "VIGILATOR_TIMEOUT",
    number(0.01, 600),
    "10",
    INBOX_G,
    "seconds per request (connect, send, read each)",
)
VIGILATOR_RETRIES = _declare(
    "VIGILATOR_RETRIES",
    integer(0, 100),
    "4",
    INBOX_G,
    "retries of a transient failure (429/502/503/504, timeouts, connection errors)",
)
VIGILATOR_RETRY_BASE_SECONDS = _declare(
    "VIGILATOR_RETRY_BASE_SECONDS",
    number(0, 60),
    "0.5",
    INBOX_G,
    "first retry delay (doubles, at most 8 s; `Retry-After` wins, up to 60 s)",
)
VIGILATOR_CONCURRENCY = _declare(
    "VIGILATOR_CONCURRENCY",
    integer(1, 256),
    "16",
    INBOX_G,
    "requests in flight while a sweep reads the waiting interrupts",
)
WEBHOOK_SECRET: Setting[tuple[str, ...] | None] = _declare(
    "WEBHOOK_SECRET",
    webhook_secrets,
    None,
    WEBHOOKS,
    "the local inbox's signing secret (`whsec_...`, 24+ bytes): signs its deliveries and verifies "
    "`/webhooks/local`; several, space separated, while rotating (the first signs)",
    example="whsec_replace-with-a-generated-secret",
    sensitive=True,
)
VIGILATOR_WEBHOOK_SECRET: Setting[tuple[str, ...] | None] = _declare(
    "VIGILATOR_WEBHOOK_SECRET",
    webhook_secrets,
    None,
    WEBHOOKS,
    "the signing secret of Vigilator's webhook (verifies `/webhooks/vigilator`); several, space "
    "separated, while rotating; unset: that source is off",
    example="whsec_replace-with-vigilators-secret",
    sensitive=True,
)
WEBHOOK_URL: Setting[str | None] = _declare(
    "WEBHOOK_URL",
    http_url,
    None,
    WEBHOOKS,
    "where the local inbox delivers signed `interrupt.answered` events",
    example="http://127.0.0.1:8000/webhooks/local",
)
WEBHOOK_RETRY_BASE_SECONDS = _declare(
    "WEBHOOK_RETRY_BASE_SECONDS",
    number(0),
    "5",
    WEBHOOKS,
    "first retry delay of a failed delivery (doubles, at most 1 h)",
)
WEBHOOK_MAX_ATTEMPTS = _declare(
    "WEBHOOK_MAX_ATTEMPTS",
    integer(1),
    "12",
    WEBHOOKS,
    "delivery attempts before the outbox gives up (polling still works)",
)
ANTHROPIC_API_KEY: Setting[str | None] = _declare(
    "ANTHROPIC_API_KEY",
    secret,
    None,
    MODEL,
    "set: run the agents on Claude; unset: the offline models",
    example="sk-ant-your-key-here",
    sensitive=True,
)
ANTHROPIC_MODEL = _declare(
    "ANTHROPIC_MODEL", text, "claude-sonnet-5-5", MODEL, "the Claude model id"
)
ANTHROPIC_BASE_URL: Setting[str | None] = _declare(
    "ANTHROPIC_BASE_URL",
    http_url,
    None,
    MODEL,
    "another endpoint speaking the Messages API",
    shown="Anthropic's",
    example="https://api.anthropic.com",
)
ANTHROPIC_MAX_RETRIES = _declare(
    "ANTHROPIC_MAX_RETRIES",
    integer(0, 100),
    "2",
    MODEL,
    "the SDK's retries of 408/409/429/5xx and connection errors",
)
ANTHROPIC_TIMEOUT = _declare(
    "ANTHROPIC_TIMEOUT", number(0.1, 3600), "600", MODEL, "seconds per API request (the SDK's)"
)
ANTHROPIC_MAX_TOKENS = _declare(
    "ANTHROPIC_MAX_TOKENS",
    integer(1, 1_000_000),
    "1024",
    MODEL,
    "most output tokens per model turn",
)
REFUND_APPROVAL_THRESHOLD = _declare(
    "REFUND_APPROVAL_THRESHOLD",
    amount,
    "20.00",
    POLICY,
    "refunds below it need no reviewer; `0`: all do",
)
PURCHASE_ORDER_APPROVAL_THRESHOLD = _declare(
    "PURCHASE_ORDER_APPROVAL_THRESHOLD",
    amount,
    "100.00",
    POLICY,
    "orders totalling less need no reviewer",
)
APPROVAL_EXPIRES_IN = _declare(
    "APPROVAL_EXPIRES_IN",
    duration,
    "48h",
    POLICY,
    "how long reviewers have to decide (`90s`, `30m`, `2h`, `2d`) before the run expires "
    "(reject, reason `expired`)",
)
REFUND_APPROVAL_EXPIRES_IN: Setting[float | None] = _declare(
    "REFUND_APPROVAL_EXPIRES_IN",
    duration,
    None,
    POLICY,
    "the approval window of refunds",
    shown="`APPROVAL_EXPIRES_IN`",
    example="48h",
)
PURCHASE_ORDER_APPROVAL_EXPIRES_IN: Setting[float | None] = _declare(
    "PURCHASE_ORDER_APPROVAL_EXPIRES_IN",
    duration,
    None,
    POLICY,
    "the approval window of purchase orders",
    shown="`APPROVAL_EXPIRES_IN`",
    example="48h",
)
APPROVAL_REMIND_AT = _declare(
    "APPROVAL_REMIND_AT",
    fraction,
    "0.5",
    POLICY,
    "fraction of the approval window at which a sweep records a reminder; `0`: none",
)
APPROVAL_ESCALATE_AT = _declare(
    "APPROVAL_ESCALATE_AT",
    fraction,
    "0.8",
    POLICY,
    "fraction of the window at which a sweep escalates; `0`: none",
)
SEPARATION_OF_DUTIES = _declare(
    "SEPARATION_OF_DUTIES",
    flag,
    "0",
    POLICY,
    "`1`: whoever requested a run may not approve or edit it (fixed on the run when it pauses)",
)
REFUND_QUORUM_AMOUNT: Setting[Decimal | None] = _declare(
    "REFUND_QUORUM_AMOUNT",
    amount,
    None,
    POLICY,
    "refunds over this amount need `REFUND_QUORUM` distinct approvers; unset: one",
    example="500",
)
REFUND_QUORUM = _declare(
    "REFUND_QUORUM",
    integer(1, 100),
    "2",
    POLICY,
    "distinct approvers for a refund over `REFUND_QUORUM_AMOUNT`",
)
PURCHASE_ORDER_QUORUM_AMOUNT: Setting[Decimal | None] = _declare(
    "PURCHASE_ORDER_QUORUM_AMOUNT",
    amount,
    None,
    POLICY,
    "the same for purchase orders (their total)",
    example="5000",
)
PURCHASE_ORDER_QUORUM = _declare(
    "PURCHASE_ORDER_QUORUM",
    integer(1, 100),
    "2",
    POLICY,
    "distinct approvers for an order over `PURCHASE_ORDER_QUORUM_AMOUNT`",
)
FAULTS: Setting[str | None] = _declare(
    "FAULTS",
    text,
    None,
    TESTS,
    "fault injection for tests, e.g. `resume.start=sleep:1.5` (see `core/faults.py`)",
    example="resume.start=sleep:1.5",
)

# groups kept in their own modules for length; they need _declare, defined above
from core.settings.access import *  # noqa: E402, F403
from core.settings.authority import *  # noqa: E402, F403
from core.settings.channels import *  # noqa: E402, F403
from core.settings.operations import *  # noqa: E402, F403
from core.settings.serverless import *  # noqa: E402, F403
from core.settings.tracing import *  # noqa: E402, F403

BY_NAME = {s.name: s for s in SETTINGS}


def check() -> None:
    """Validate every setting now; the first bad one, or an unknown name (any in ``.env``, one
    close to a setting in the environment: :mod:`core.settings.names`) raises ``UserError``."""
    import os

    from core.settings import model, names

    global _checked
    # an entry point checks, then the Runner it builds checks the same sources again
    if model.sources_seen() == _checked:
        return
    for name, where, suggestion in names.typos(os.environ, _dotenv_names(), BY_NAME):
        raise UserError(names.message(name, where, suggestion))
    model.load()  # every source at once: environment, .env, SECRETS_DIR (pydantic-settings)
    _checked = model.sources_seen()  # after load: it exports file-only secrets


_checked: object = None  # the sources as the last check that passed saw them


def _dotenv_names() -> list[str]:
    """The names ``.env`` in the working directory sets (it is loaded into the environment, so
    only the file says which came from it)."""
    from pathlib import Path

    from dotenv import dotenv_values

    path = Path(".env")
    return list(dotenv_values(path)) if path.is_file() else []
