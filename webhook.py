"""FastAPI app: signed inbox webhooks, the run API, health.

uv run uvicorn webhook:app          (production: add --host/--port/--workers)
uv run uvicorn webhook:app --reload (development)
"""

from api.app import create_app
from core.cli import cli_main

app = cli_main(create_app)()
