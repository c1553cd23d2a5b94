"""Every refusal the HTTP app gives, in one shape and mapped in one place:
``{"error": {"code": ..., "message": ...}}`` with a 4xx status."""

from __future__ import annotations

from collections.abc import Mapping

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

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def error_body(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": scrub(message)}}


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


def refused(refusal: Refused) -> ApiError:
    return ApiError(REFUSAL_STATUS[refusal.reason], refusal.reason.name.lower(), refusal.message)
