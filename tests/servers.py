"""Real servers for tests: the webhook app under uvicorn on 127.0.0.1, and signed deliveries."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from conftest import ROOT, settings_to_clear
from svix.webhooks import Webhook

SECRET = "whsec_" + base64.b64encode(b"test-secret-for-webhooks-32byte!").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"another-secret-nobody-configured").decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log: str

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def worker_env(db_env: dict[str, str], **extra: str) -> dict[str, str]:
    cleared = set(settings_to_clear())
    env = {k: v for k, v in os.environ.items() if k not in cleared}
    return {**env, "PYTHONPATH": str(ROOT), "WEBHOOK_SECRET": SECRET, **db_env, **extra}


def uvicorn_command(port: int) -> list[str]:
    """``uvicorn webhook:app`` on 127.0.0.1:``port``, as an operator would run it."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "webhook:app",
        "--app-dir",
        str(ROOT),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]


def start_server(env: dict[str, str], log_path, port: int | None = None) -> Server:
    """Start ``uvicorn webhook:app`` and wait until /healthz answers."""
    port = port or free_port()
    log = open(log_path, "w")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        uvicorn_command(port),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=str(log_path.parent),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {open(log_path).read()}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return Server(url, proc, str(log_path))
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not start: {open(log_path).read()}")


def sign(
    body: str, *, secret: str = SECRET, msg_id: str = "msg_test", at: datetime | None = None
) -> dict[str, str]:
    at = at or datetime.now(UTC)
    return {
        "content-type": "application/json",
        "svix-id": msg_id,
        "svix-timestamp": str(int(at.timestamp())),
        "svix-signature": Webhook(secret).sign(msg_id, at, body),
    }


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
