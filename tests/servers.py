"""Real servers for tests: the webhook app under uvicorn on 127.0.0.1, and signed deliveries."""

from __future__ import annotations

import base64
import json
import time
from datetime import datetime

import httpx

from testkit.databases import worker_env as testkit_worker_env
from testkit.servers import SECRET, Server, free_port, svix_headers, uvicorn_command
from testkit.servers import start_server as testkit_start_server

__all__ = ["SECRET", "Server", "free_port", "uvicorn_command"]

OTHER_SECRET = "whsec_" + base64.b64encode(b"another-secret-nobody-configured").decode()


def worker_env(db_env: dict[str, str], **extra: str) -> dict[str, str]:
    return testkit_worker_env(db_env, SECRET, **extra)


def start_server(env: dict[str, str], log_path, port: int | None = None) -> Server:
    return testkit_start_server(env, log_path, port=port, timeout=60)


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


def wait_for_status(url: str, thread_id: str, status: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    view: dict = {}
    while time.monotonic() < deadline:
        view = httpx.get(f"{url}/runs/{thread_id}").json()
        if view.get("status") == status:
            return view
        time.sleep(0.05)
    raise AssertionError(f"run {thread_id} never became {status}: {view}")
