"""The reviewers' web inbox: server-rendered pages (queue, request, decisions, failed and stuck
runs) over the same Runner and store as the API, signed in with the same credentials; they work
without JavaScript, and ship with the package (no build step, no CDN)."""

from pathlib import Path

from fastapi import APIRouter

from api.pages import answer, delegations, operations, preview, queue, request, session

router = APIRouter(include_in_schema=False)
router.include_router(session.router)
router.include_router(queue.router)
router.include_router(request.router)
router.include_router(preview.router)
router.include_router(answer.router)
router.include_router(operations.router)
router.include_router(delegations.router)

STATIC = Path(__file__).resolve().parent.parent / "static"

__all__ = ["STATIC", "router"]
