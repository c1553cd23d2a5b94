"""Operator endpoints: ``/readyz`` (the database answers, within a short timeout) and
``/metrics`` (Prometheus, behind the ``METRICS_TOKEN`` bearer token)."""

from __future__ import annotations

import asyncio
import hmac
import sys
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from api.errors import ApiError
from core import settings

if TYPE_CHECKING:
    from ops.metrics import DatabaseGauges
    from store.db import Store

router = APIRouter(tags=["operations"])

READY_TIMEOUT = 2.0  # seconds: a down database answers 503 well under the 3 s a probe allows


def is_outage(exc: BaseException) -> bool:
    """The database is unreachable or locked: the request may succeed later (503)."""
    import sqlite3

    if isinstance(exc, sqlite3.OperationalError):
        return "locked" in str(exc) or "busy" in str(exc) or "unable to open" in str(exc)
    return isinstance(exc, _postgres_errors())


def _postgres_errors() -> tuple[type[Exception], ...]:
    """psycopg's outage types, if psycopg is loaded: a process that never opened Postgres
    cannot meet them, and need not import it (about 0.2 s of a serverless cold start)."""
    psycopg, pool = sys.modules.get("psycopg"), sys.modules.get("psycopg_pool")
    if psycopg is None or pool is None:
        return ()
    return (psycopg.OperationalError, pool.PoolTimeout)


def database_gauges(store: Store) -> DatabaseGauges:
    """The gauges ``/metrics`` reads from the database; with ``METRICS_TOKEN`` set (or
    ``PROMETHEUS_MULTIPROC_DIR``), this process starts keeping its counters too, registered
    now, at start-up."""
    from ops import metrics

    if settings.METRICS_TOKEN.get():
        metrics.serve()
    metrics.prepare()  # registered before any request counts (PROMETHEUS_MULTIPROC_DIR)
    return metrics.DatabaseGauges(store)


def outage_errors() -> tuple[type[Exception], ...]:
    """The exception types :func:`is_outage` may accept (each gets the app's 503 handler):
    psycopg's only when Postgres is configured (on SQLite nothing raises them)."""
    import sqlite3

    if settings.DATABASE_URL.get():
        import psycopg
        from psycopg_pool import PoolTimeout

        return (sqlite3.OperationalError, psycopg.OperationalError, PoolTimeout)
    return (sqlite3.OperationalError,)


@router.get("/readyz", response_model=None)
async def readyz(request: Request) -> JSONResponse | dict[str, str]:
    """Ready when one trivial query answers within ``READY_TIMEOUT``; 503 otherwise."""
    store = request.app.state.runner.store
    try:
        await asyncio.wait_for(asyncio.to_thread(store.ping), READY_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - any failure means not ready; the name is enough
        reason = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
        body = {"status": "unavailable", "database": store.backend, "reason": reason}
        return JSONResponse(body, 503)
    return {"status": "ready", "database": store.backend}


@router.get("/metrics", include_in_schema=False)
def metrics_endpoint(request: Request) -> Response:
    token = settings.METRICS_TOKEN.get()
    if not token:
        raise ApiError(404, "not_found", "metrics are off; set METRICS_TOKEN to turn them on")
    given = request.headers.get("authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <METRICS_TOKEN>")
    from prometheus_client import CONTENT_TYPE_LATEST

    from ops.metrics import render

    return Response(render(request.app.state.gauges), media_type=CONTENT_TYPE_LATEST)
