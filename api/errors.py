"""Every refusal the HTTP app gives, in one shape and mapped in one place:
``{"error": {"code": ..., "message": ...}}`` with a 4xx status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse

from core.errors import scrub
from worker.refusals import Refusal, Refused

# Every refusal's status, by its reason (the error code is the reason's name).
REFUSAL_STATUS = {
    Refusal.UNKNOWN_RUN: 404,
    Refusal.EXPIRED: 410,
    Refusal.INVALID: 422,
    Refusal.DUTIES: 403,
    Refusal.AUTHORITY: 403,
    Refusal.DELEGATION: 403,
    Refusal.DISAGREE: 422,
    Refusal.NOT_WAITING: 409,
    Refusal.DECIDED: 409,
    Refusal.OTHER_INTERRUPT: 409,
    Refusal.STALE: 409,
    Refusal.REPEATED: 409,
    Refusal.NOT_CANCELLABLE: 409,
    Refusal.NOT_FAILED: 409,
    Refusal.ID_TAKEN: 409,
    Refusal.HALTED: 423,
    Refusal.UNAUTHORIZED: 401,
}


class ApiError(Exception):
    """Raised by a handler: answered as ``status`` with the one error shape."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: dict | None = None,
        details: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.details = dict(details or {})


def error_body(code: str, message: str, details: Mapping[str, str] | None = None) -> dict:
    """The one error shape; ``details`` (ids, ISO 8601 times) only where a refusal has them,
    beside the message a person reads."""
    body: dict[str, Any] = {"code": code, "message": scrub(message)}
    if details:
        body["details"] = {str(k): scrub(str(v)) for k, v in details.items()}
    return {"error": body}


def error_response(
    status: int,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    details: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)


def refused(refusal: Refused) -> ApiError:
    status, code = REFUSAL_STATUS[refusal.reason], refusal.reason.name.lower()
    return ApiError(status, code, refusal.message, details=refusal.details)
