"""Per-caller limits: how often a person (by identity, whatever their credential) and a client
address may start runs, decide and try to sign in (counted in the database, so every process
shares them), and how many open runs one requester may have. Beyond a limit: ``429`` with
``Retry-After`` in the one error shape."""

from __future__ import annotations

from fastapi import Request

from api.errors import ApiError
from core import settings
from core.identity import identity_key
from core.settings.kinds import Setting


def client_address(request: Request) -> str:
    """The caller's address: the last hop a trusted proxy added, else the peer."""
    if settings.TRUST_PROXY_HEADERS.get():
        hops = [h.strip() for h in request.headers.get("x-forwarded-for", "").split(",")]
        if hops and hops[-1]:
            return hops[-1][:64]
    return request.client.host if request.client else "unknown"


def throttle(
    request: Request, action: str, limit: Setting[tuple[int, float] | None], *callers: str
) -> None:
    """Count one ``action`` for the client address and each of ``callers`` (a credential);
    refuse with 429 when any of them is over ``limit``."""
    rate = limit.get()
    if rate is None:
        return
    count, window = rate
    limits = request.app.state.runner.store.tables.rate_limits()
    buckets = [f"{action}:{who}"[:300] for who in (f"addr:{client_address(request)}", *callers)]
    waits = limits.hit(buckets, count, window)
    refused = [v.retry_after for v in waits if not v.allowed]
    if refused:
        wait = max(refused)
        raise ApiError(
            429,
            "rate_limited",
            f"too many requests ({limit.name}={limit.raw()}); retry in {wait} s",
            {"Retry-After": str(wait)},
        )


def credential(name: str) -> str:
    """The bucket of a caller: their identity, so that N keys (or a key and a JWT) of one
    person share one rate rather than get N."""
    return f"id:{identity_key(name)}"


def over_quota(quota: int) -> ApiError:
    return ApiError(
        429,
        "quota_exceeded",
        f"you have {quota} open runs (MAX_OPEN_RUNS); wait for some to finish",
        {"Retry-After": "60"},
    )
