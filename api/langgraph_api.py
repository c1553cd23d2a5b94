"""The LangGraph Server API under ``/lg``, for what this product does: ``langgraph-sdk`` (Python
and JavaScript, ``get_client(url="<PUBLIC_URL>/lg", api_key=...)``) and Agent Inbox (deployment
URL ``<PUBLIC_URL>/lg``) start runs, follow them, read the graph's state and interrupts, and
resume them, in LangGraph's own shapes (``docs/reference/langgraph.md`` lists each route and how
it differs from LangGraph's).

Underneath, a thread is a run of this product (``POST /runs`` makes the same one): started
under the requester's key, paused with no process holding it, resumed through the one decision
path under the reviewer's key, every rule applied. Keys come as ``x-api-key`` (``api.auth``).
A route not served answers one 404 ``unsupported``.
"""

from __future__ import annotations

from fastapi import APIRouter

from api.auth import Reader
from api.lg_assistants import router as assistants
from api.lg_common import PREFIX, unsupported
from api.lg_runs import router as runs
from api.lg_stream import router as streams
from api.lg_threads import router as threads
from core.version import current

# each part's routes, whole (their templates keep the prefix: traces name them by it)
router = APIRouter(tags=["langgraph"])
for part in (assistants, threads, streams, runs):  # streams before runs/{run_id}
    router.routes.extend(part.routes)


@router.get(PREFIX + "/info", tags=["langgraph"])
def info(who: Reader) -> dict[str, object]:
    """What LangGraph's ``/info`` tells a client (Agent Inbox asks when an inbox is added):
    the server's version and which optional parts it serves (assistants yes; crons and
    LangSmith no)."""
    return {"version": current(), "flags": {"assistants": True, "crons": False, "langsmith": False}}


@router.api_route(
    PREFIX + "/{rest:path}",
    methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
    include_in_schema=False,
)
def not_served(rest: str, who: Reader) -> None:
    raise unsupported(f"/{rest[:100]}")
