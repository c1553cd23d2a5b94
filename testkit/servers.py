"""The webhook app as an operator runs it (``uvicorn webhook:app`` on 127.0.0.1) or in this
process, free ports, and Svix-signed deliveries."""

from __future__ import annotations

import base64
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from testkit import zygote
from testkit.databases import ROOT

HOST = "127.0.0.1"
SECRET = "whsec_" + base64.b64encode(b"test-secret-for-webhooks-32byte!").decode()
LOCAL_SECRET = "whsec_" + base64.b64encode(b"test-secret-for-local-inbox-32b!").decode()


_DRAWN: deque[int] = deque(maxlen=256)  # a few per test; 256 of the >3,000 a worker can draw


def free_port() -> int:
    """A port nobody listens on now, drawn at random below Linux's ephemeral range (32768 and
    up), so no outgoing connection takes it between the draw and the server's bind. Under
    pytest-xdist each worker draws only ports equal to its index modulo the worker count, so
    two workers never draw the same one (and then find the other's server answering their
    health check). Not ``bind(0)``: the kernel hands those out with one parity only. Nor one of
    this process's last draws: a test may draw a port long before anything binds it (a closed
    port to be refused on, a server started later), and a second draw must not land on it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker[2:]) if worker.startswith("gw") else 0
    while True:
        port = random.randrange(20000 + index, 32768, count)
        if port in _DRAWN:
            continue
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue  # someone listens there: draw again
        _DRAWN.append(port)
        return port


@dataclass
class Server:
    port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log(self) -> str:
        return str(self.log_path)

    def stop(self) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, and SIGKILL if it is still there 20 s later."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process under it (resumer processes, workers), parents first."""
    pids = [pid]
    for parent in pids:  # grows while it is walked: children, then theirs
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the process ended meanwhile
            if int(fields[1]) == parent:
                pids.append(int(stat.parent.name))
    return pids


def uvicorn_command(app: str, port: int, *, workers: int = 1, access_log: bool = True) -> list:
    """``uvicorn <app>`` on 127.0.0.1:``port``, as an operator would run it."""
    cmd = [sys.executable, "-m", "uvicorn", app, "--app-dir", str(ROOT), "--host", HOST]
    cmd += ["--port", str(port), "--log-level", "warning"]
    if not access_log:
        cmd.append("--no-access-log")
    if workers > 1:
        cmd += ["--workers", str(workers)]
    return cmd


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/healthz", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def start_server(
    env: dict[str, str],
    log_path: Path,
    *,
    app: str = "webhook:app",
    port: int | None = None,
    workers: int = 1,
    access_log: bool = True,
    timeout: float = 90,
) -> Server:
    """Start ``uvicorn <app>`` (forked from the zygote, ``testkit.zygote``) and wait until
    ``/healthz`` answers 200."""
    port = port or free_port()
    log = open(log_path, "w")  # noqa: SIM115 - the server writes to it until stopped
    proc = zygote.popen(
        uvicorn_command(app, port, workers=workers, access_log=access_log),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=str(log_path.parent),
    )
    server = Server(port, proc, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{app} exited: {log_path.read_text()[-3000:]}")
        if _healthy(port):
            return server
        time.sleep(0.1)  # polls until /healthz answers (deadline above)
    server.stop()
    raise RuntimeError(f"{app} did not answer /healthz in {timeout:.0f}s: {log_path.read_text()}")


def svix_headers(
    body: str, *, secret: str = SECRET, msg_id: str = "msg_test", at: datetime | None = None
) -> dict[str, str]:
    """Headers that sign ``body`` as Svix does (signed with svix's own ``Webhook.sign``)."""
    from svix.webhooks import Webhook

    at = at or datetime.now(UTC)
    return {
        "content-type": "application/json",
        "svix-id": msg_id,
        "svix-timestamp": str(int(at.timestamp())),
        "svix-signature": Webhook(secret).sign(msg_id, at, body),
    }


def hold_port(port: int) -> socket.socket:
    """``port`` bound on 127.0.0.1 and not listening: a connection to it is refused, as to a
    receiver that is down, and no other server of this run can be given it meanwhile
    (``free_port`` draws again) until the holder listens on it (``serve_http(held=...)``)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past its own TIME_WAITs
    try:
        sock.bind((HOST, port))
    except OSError:
        sock.close()
        raise
    return sock


def serve_http(
    port: int,
    handler: type[BaseHTTPRequestHandler],
    server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer,
    held: socket.socket | None = None,
) -> ThreadingHTTPServer:
    """A local stand-in's HTTP server on 127.0.0.1 (``port`` 0: any free one), answering on a
    thread of its own; on ``held`` (from ``hold_port``) where the port must not change hands
    between its choice and the server's start."""
    if held is None:
        server = server_class((HOST, port), handler)
    else:
        server = server_class((HOST, port), handler, bind_and_activate=False)
        server.socket.close()
        server.socket = held
        server.server_address = held.getsockname()
        server.server_activate()  # listen(): from here it answers
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop_http(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


@contextmanager
def serve_app(app: Any, port: int | None = None) -> Iterator[str]:
    """``app`` under uvicorn on 127.0.0.1 in this process (a thread), for a test that reaches
    into what it serves from (``app.state``) while real HTTP requests come in; yields its URL
    once the app has started (its lifespan opened the store), stops it after. ``port``: one
    chosen before the app was made (its ``PUBLIC_URL``, say)."""
    import uvicorn

    port = port or free_port()
    config = uvicorn.Config(app, host=HOST, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the app did not start on port {port}")
        time.sleep(0.02)  # polls until uvicorn says started (deadline above)
    try:
        yield f"http://{HOST}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def kill_tree(server: Server) -> None:
    """SIGKILL the server and every process under it (its resumer processes), as a machine
    that loses power would: nothing is handed back, no lease released."""
    for pid in process_tree(server.proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    server.proc.wait()
