"""The *Serverless* settings (AWS Lambda and other platforms that freeze a function once it
has answered), declared like every other setting; kept in their own module for length.
"""

from __future__ import annotations

from core.settings import _declare
from core.settings.kinds import Setting, choice, flag, number, text

__all__ = [
    "AWS_LAMBDA_FUNCTION_NAME",
    "SERVERLESS",
    "RESUME_BUDGET_SECONDS",
    "DATABASE_POOLER",
    "serverless",
]

SERVERLESS_G = "Serverless"
AWS_LAMBDA_FUNCTION_NAME: Setting[str | None] = _declare(
    "AWS_LAMBDA_FUNCTION_NAME",
    text,
    None,
    SERVERLESS_G,
    "set by AWS Lambda itself (read only): its presence turns `SERVERLESS` on",
    shown="set by Lambda",
    example="approval-worker-http",
)
SERVERLESS: Setting[bool | None] = _declare(
    "SERVERLESS",
    flag,
    None,
    SERVERLESS_G,
    "`1`: decisions resume inline within `RESUME_BUDGET_SECONDS` (no work after the answer), "
    "a small Postgres pool",
    shown="`1` inside Lambda, else `0`",
    example="1",
)
RESUME_BUDGET_SECONDS = _declare(
    "RESUME_BUDGET_SECONDS",
    number(0.1, 14),
    "10",
    SERVERLESS_G,
    "serverless: how long a webhook or decision waits for the resume before answering 202 "
    "(below Svix's 15 s timeout)",
)
DATABASE_POOLER = _declare(
    "DATABASE_POOLER",
    choice("direct", "transaction"),
    "direct",
    SERVERLESS_G,
    "`transaction`: Postgres is behind PgBouncer / RDS Proxy in transaction mode "
    "(no prepared statements)",
)


def serverless() -> bool:
    """Serverless mode: ``SERVERLESS`` if set, else on exactly when running inside Lambda."""
    value = SERVERLESS.get()
    return bool(AWS_LAMBDA_FUNCTION_NAME.get()) if value is None else value
