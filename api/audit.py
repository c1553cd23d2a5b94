"""``GET /audit/export``: every decision in a period, streamed, for operators (an auditor's
take-away); JSONL carries the period's signed anchors and ends with an anchor signed with
``AUDIT_ANCHOR_KEY`` so the file verifies alone, CSV is for reading."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from api.auth import Operator
from api.errors import ApiError
from api.models import ErrorBody
from core import settings
from core.errors import UserError
from worker.export import csv_lines, jsonl, parse_moment, records

router = APIRouter(tags=["audit"])
ERRORS: dict[int | str, dict[str, Any]] = {c: {"model": ErrorBody} for c in (401, 403, 422)}


@router.get("/audit/export", responses=ERRORS)
def export(
    request: Request,
    _: Operator,
    start: str = Query(alias="from", max_length=40, description="UTC, e.g. 2026-01-01"),
    end: str = Query(alias="to", max_length=40, description="exclusive"),
    format: Literal["jsonl", "csv"] = "jsonl",
) -> StreamingResponse:
    """Every decision (claims and expiries) from ``from`` up to ``to``: run, workflow,
    requester, approvers, times, outcome, the event's position and hashes in its run's chain."""
    try:
        lo, hi = parse_moment(start), parse_moment(end)
    except UserError as exc:
        raise ApiError(422, "invalid_period", str(exc)) from None
    trail = request.app.state.runner.store.tables.audit()
    rows = records(trail, lo, hi)
    if format == "csv":
        return StreamingResponse(csv_lines(rows), media_type="text/csv")
    lines = jsonl(rows, settings.AUDIT_ANCHOR_KEY.get(), trail.anchors_in_period(lo, hi))
    return StreamingResponse(lines, media_type="application/x-ndjson")
