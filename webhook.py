"""FastAPI app: signed inbox webhooks, the run status API, health.

uv run uvicorn webhook:app          (production: add --host/--port/--workers)
uv run fastapi dev webhook.py       (development, with reload)
"""

from api import create_app
from store.cli import cli_main

app = cli_main(create_app)()
