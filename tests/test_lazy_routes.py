"""The Lambda handler's app builds its routes past the webhooks' on first need
(``create_app(lazy=True)``): it must describe and route every request as the full app does."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.testclient import TestClient

from api.app import create_app


def _paths(app: FastAPI) -> list[str]:
    return [str(getattr(route, "path", type(route).__name__)) for route in app.routes]


def test_the_schema_of_a_lazy_app_describes_every_route() -> None:
    full, lazy = create_app(), create_app(lazy=True)
    assert len(lazy.routes) < len(full.routes)  # only the webhooks' so far
    assert lazy.openapi() == full.openapi()
    assert _paths(lazy) == _paths(full)


def test_a_request_no_webhook_route_answers_builds_the_rest_first() -> None:
    full = create_app()
    lazy = create_app(lazy=True)
    client = TestClient(lazy)  # no lifespan: no route here needs the store
    missing = client.get("/no-such-page")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert _paths(lazy) == _paths(full)
    # a method the webhook route does not take (a partial match): 405, as the full app answers
    fresh = create_app(lazy=True)
    wrong = TestClient(fresh).get("/webhooks/vigilator")
    assert wrong.status_code == TestClient(full).get("/webhooks/vigilator").status_code == 405
    assert _paths(fresh) == _paths(full)
