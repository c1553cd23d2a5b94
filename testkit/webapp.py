"""The webhook app as most tests serve it (uvicorn on 127.0.0.1, the inboxes' secrets, an
operator key to watch its runs), and the signed deliveries they send it."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from testkit import loopback
from testkit.databases import TEST_SERVER, api_key
from testkit.databases import worker_env as testkit_worker_env
from testkit.servers import LOCAL_SECRET, SECRET, Server, free_port, svix_headers, uvicorn_command
from testkit.servers import start_server as testkit_start_server
from testkit.wait import until

__all__ = ["LOCAL_SECRET", "SECRET", "Server", "api_key", "free_port", "uvicorn_command"]

OTHER_SECRET = "whsec_" + base64.b64encode(b"another-secret-nobody-configured").decode()


def worker_env(db_env: dict[str, str], **extra: str) -> dict[str, str]:
    """Vigilator's deliveries are signed with SECRET, the local inbox's with LOCAL_SECRET; the
    app resumes on its own threads unless ``extra`` asks for resumer processes (TEST_SERVER)."""
    secrets = {"WEBHOOK_SECRET": LOCAL_SECRET, "VIGILATOR_WEBHOOK_SECRET": SECRET}
    return testkit_worker_env(db_env, **{**TEST_SERVER, **secrets, **extra})


def sign(
    body: str, *, secret: str = SECRET, msg_id: str = "msg_test", at: datetime | None = None
) -> dict[str, str]:
    return svix_headers(body, secret=secret, msg_id=msg_id, at=at)


def answered_event(
    interrupt_id: str, thread_id: str, decisions: list[dict], app: str = "approval-worker"
) -> str:
    """A Vigilator-shaped ``interrupt.answered`` body."""
    return json.dumps(
        {
            "type": "interrupt.answered",
            "data": {
                "id": interrupt_id,
                "externalId": f"{app}:{thread_id}",
                "status": "answered",
                "actionRequests": decisions,
            },
        }
    )


def approve_item(name: str = "issue_refund", by: str = "alice") -> dict:
    return {"name": name, "decision": "approve", "decidedByName": by}


def wait_for_status(
    url: str, thread_id: str, status: str, timeout: float = 30, headers: dict | None = None
) -> dict:
    """Poll ``GET /runs/{thread_id}`` (as ``headers``, an operator's by default) until the run
    has ``status``."""

    def reached() -> dict | None:
        view = loopback.get(f"{url}/runs/{thread_id}", headers=headers or OBSERVER[url]).json()
        return view if view.get("status") == status else None

    return until(reached, f"run {thread_id} to become {status}", timeout)


OBSERVER: dict[str, dict] = {}  # url -> an operator's headers, set when the server starts


def start_server(
    env: dict[str, str], log_path, port: int | None = None, workers: int = 1
) -> Server:
    """``uvicorn webhook:app`` with an operator key made for polling its runs."""
    db_env = {k: env[k] for k in ("DATABASE_URL", "SQLITE_PATH") if k in env}
    server = testkit_start_server(env, log_path, port=port, workers=workers, timeout=60)
    OBSERVER[server.url] = api_key(db_env, "observer", "operator")
    return server
