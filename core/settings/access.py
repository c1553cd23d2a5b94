"""The *Access and limits* settings: which workflows the API may start, the JWT provider, the
bounds on input, and the web inbox's sessions. Declared through :func:`core.settings._declare`
like every other setting (so they are checked at start-up and in the README table); kept in
their own module only to keep ``core/settings/__init__.py`` short.
"""

from __future__ import annotations

from core.settings import _declare
from core.settings.kinds import Setting, flag, http_url, integer, names, number, rate, text

ACCESS = "Access and limits"

__all__ = [
    "API_WORKFLOWS",
    "JWT_ISSUER",
    "JWT_AUDIENCE",
    "JWT_JWKS_URL",
    "JWT_PUBLIC_KEY",
    "JWT_ALGORITHMS",
    "JWT_USER_CLAIM",
    "JWT_ROLES_CLAIM",
    "MAX_INPUT_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_JSON_DEPTH",
    "SESSION_HOURS",
    "TRUST_PROXY_HEADERS",
    "RATE_LIMIT_RUNS",
    "RATE_LIMIT_DECISIONS",
    "RATE_LIMIT_LOGINS",
    "MAX_OPEN_RUNS",
    "MAX_BODY_BYTES_IN_FLIGHT",
    "HEADER_READ_SECONDS",
    "BODY_READ_SECONDS",
]

API_WORKFLOWS = _declare(
    "API_WORKFLOWS",
    names,
    "",
    ACCESS,
    "workflows `POST /runs` may start besides the built-in ones (names or "
    "`package.module:factory`, comma separated); a request never names code to import",
    example="examples.byo_agent:build_graph",
)
JWT_ISSUER: Setting[str | None] = _declare(
    "JWT_ISSUER",
    text,
    None,
    ACCESS,
    "the identity provider's issuer (`iss`); set to accept JWTs",
    example="https://id.example.com/",
)
JWT_AUDIENCE: Setting[str | None] = _declare(
    "JWT_AUDIENCE",
    text,
    None,
    ACCESS,
    "the audience (`aud`) tokens must be issued for",
    example="approval-worker",
)
JWT_JWKS_URL: Setting[str | None] = _declare(
    "JWT_JWKS_URL",
    http_url,
    None,
    ACCESS,
    "where the provider publishes its signing keys (JWKS)",
    example="https://id.example.com/.well-known/jwks.json",
)
JWT_PUBLIC_KEY: Setting[str | None] = _declare(
    "JWT_PUBLIC_KEY",
    text,
    None,
    ACCESS,
    "or: the provider's public key, PEM text",
)
JWT_ALGORITHMS = _declare(
    "JWT_ALGORITHMS", names, "RS256,ES256", ACCESS, "signature algorithms accepted"
)
JWT_USER_CLAIM = _declare(
    "JWT_USER_CLAIM", text, "sub", ACCESS, "the claim naming the user (the decision's identity)"
)
JWT_ROLES_CLAIM = _declare(
    "JWT_ROLES_CLAIM",
    text,
    "roles",
    ACCESS,
    "the claim listing roles (`requester`, `reviewer`, ...)",
)
MAX_INPUT_CHARS = _declare(
    "MAX_INPUT_CHARS",
    integer(1, 1_000_000),
    "20000",
    ACCESS,
    "longest request text (`POST /runs` `input`, `run.py`) and longest string in any JSON value",
)
MAX_TEXT_CHARS = _declare(
    "MAX_TEXT_CHARS",
    integer(1, 100_000),
    "2000",
    ACCESS,
    "longest short text: names, reasons, messages, keys of JSON objects",
)
MAX_JSON_DEPTH = _declare(
    "MAX_JSON_DEPTH", integer(2, 200), "20", ACCESS, "deepest nesting of any JSON that comes in"
)
SESSION_HOURS = _declare(
    "SESSION_HOURS",
    number(0.01, 24 * 365),
    "8",
    ACCESS,
    "hours a web inbox sign-in lasts (the `aw_session` cookie's Max-Age)",
)
TRUST_PROXY_HEADERS = _declare(
    "TRUST_PROXY_HEADERS",
    flag,
    "0",
    ACCESS,
    "`1`: believe `X-Forwarded-Proto` (behind a TLS-terminating proxy) when marking cookies Secure",
)
RATE_LIMIT_RUNS = _declare(
    "RATE_LIMIT_RUNS",
    rate,
    "60/1m",
    ACCESS,
    "`POST /runs` allowed per credential and, separately, per client address (`N/period`; "
    "`0`: no limit); shared by every process on Postgres, `429` with `Retry-After` beyond it",
)
RATE_LIMIT_DECISIONS = _declare(
    "RATE_LIMIT_DECISIONS",
    rate,
    "120/1m",
    ACCESS,
    "decisions (API and web inbox) allowed per credential and per client address",
)
RATE_LIMIT_LOGINS = _declare(
    "RATE_LIMIT_LOGINS",
    rate,
    "20/5m",
    ACCESS,
    "web inbox sign-in attempts allowed per client address and per API key id",
)
MAX_OPEN_RUNS = _declare(
    "MAX_OPEN_RUNS",
    integer(0),
    "200",
    ACCESS,
    "runs one requester may have open (not finished) at once; `0`: no quota",
)
MAX_BODY_BYTES_IN_FLIGHT = _declare(
    "MAX_BODY_BYTES_IN_FLIGHT",
    integer(1024 * 1024),
    str(32 * 1024 * 1024),
    ACCESS,
    "request body bytes one process holds at once; beyond it a request gets `503` at once",
)
HEADER_READ_SECONDS = _declare(
    "HEADER_READ_SECONDS",
    number(0.1, 600),
    "10",
    ACCESS,
    "seconds a connection has to send a request's headers (`approval-worker serve`); a slower "
    "one is closed, so idle or trickling connections hold nothing",
)
BODY_READ_SECONDS = _declare(
    "BODY_READ_SECONDS",
    number(0.1, 3600),
    "30",
    ACCESS,
    "seconds a request has to send its whole body once its headers are in; a slower one gets "
    "`408` and is closed",
)
