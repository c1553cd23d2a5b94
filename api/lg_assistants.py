"""``/lg`` assistants: one per workflow this app may start (``API_WORKFLOWS`` and the built-in
ones), its id fixed by its name, with its graph and its schemas as LangGraph draws them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from api.auth import Reader
from api.lg_common import PREFIX, assistant_id, runner_of, workflow_of
from api.runs import errors
from worker.runner import Runner
from worker.workflows import http_names

router = APIRouter(prefix=PREFIX, tags=["langgraph"])
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC).isoformat()  # assistants are code: never edited


def _assistant(workflow: str) -> dict[str, Any]:
    return {
        "assistant_id": assistant_id(workflow),
        "graph_id": workflow,
        "config": {},
        "context": {},
        "created_at": _EPOCH,
        "updated_at": _EPOCH,
        "metadata": {"created_by": "system"},
        "version": 1,
        "name": workflow,
        "description": None,
    }


class Search(BaseModel):
    model_config = ConfigDict(extra="ignore")

    graph_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=100)
    offset: int = Field(default=0, ge=0)


@router.post("/assistants/search", response_model=None, responses=errors())
def search_assistants(body: Search, who: Reader) -> list[dict[str, Any]]:
    found = [
        _assistant(name)
        for name in http_names()
        if body.graph_id in (None, name) and (body.name is None or body.name in name)
    ]
    return found[body.offset : body.offset + body.limit]


@router.post("/assistants/count", response_model=None, responses=errors())
def count_assistants(body: Search, who: Reader) -> int:
    return len(search_assistants(body.model_copy(update={"limit": 100, "offset": 0}), who))


@router.get("/assistants/{assistant}", response_model=None, responses=errors(404))
def get_assistant(assistant: str, who: Reader) -> dict[str, Any]:
    return _assistant(workflow_of(assistant))


def _schema(call: Any) -> dict | None:
    try:
        return call()
    except Exception:  # noqa: BLE001 - LangGraph also leaves out what it cannot draw
        return None


@router.get("/assistants/{assistant}/graph", response_model=None, responses=errors(404))
def get_graph(assistant: str, request: Request, who: Reader, xray: bool = False) -> dict:
    """The graph's nodes and edges, as ``get_graph().to_json()`` draws them."""
    graph = _graph(runner_of(request), assistant)
    return graph.get_graph(xray=xray).to_json()


@router.get("/assistants/{assistant}/schemas", response_model=None, responses=errors(404))
def get_schemas(assistant: str, request: Request, who: Reader) -> dict[str, Any]:
    workflow = workflow_of(assistant)
    graph = _graph(runner_of(request), assistant)
    return {
        "graph_id": workflow,
        "input_schema": _schema(graph.get_input_jsonschema),
        "output_schema": _schema(graph.get_output_jsonschema),
        "state_schema": _schema(lambda: graph.get_output_jsonschema()),
        "config_schema": _schema(graph.config_schema().model_json_schema),
        "context_schema": _schema(graph.get_context_jsonschema),
    }


def _graph(runner: Runner, assistant: str) -> Any:
    return runner.graph(workflow_of(assistant))
