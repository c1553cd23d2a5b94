"""FastAPI app: signed inbox webhooks, the run API, health.

uv run uvicorn webhook:app          (production: add --host/--port/--workers)
uv run uvicorn webhook:app --reload (development)

Importing this reads no setting and opens nothing: the settings, the secrets and the database
are checked and opened when the server starts (the app's lifespan), where a bad one is one
``error:`` line and exit 2.
"""

from api.app import create_app

app = create_app()
