"""The HTTP app for an ASGI server: ``uvicorn webhook:app`` (development: add ``--reload``).

In production run ``approval-worker serve --host 0.0.0.0 --port 8000 [--workers N]``: the
same app, with every log line the app's own (``LOG_FORMAT=json``: one JSON object per line).

Importing this reads no setting and opens nothing: the settings, the secrets and the database
are checked and opened when the server starts (the app's lifespan), where a bad one is one
``error:`` line and exit 2 (1 when the database cannot be reached).
"""

from api.app import create_app

app = create_app()
