"""Slow clients cannot starve others (``approval-worker serve``, real sockets on 127.0.0.1):
33 connections that declare a megabyte of body and send one byte, and 300 that trickle half a
request's headers, leave ``POST /runs`` answering normally (the in-flight cap counts bytes
received, not declared); then the body deadline answers each slow body 408 and the header
deadline closes each slow header connection."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest

from testkit import loopback, zygote
from testkit.databases import ROOT, settings_to_clear
from testkit.sockets import connect, read_by_server, status_of
from testkit.wait import until
from testkit.webapp import LOCAL_SECRET, api_key, free_port

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the server, not the db


def _healthy(url: str, proc: subprocess.Popen) -> bool:
    assert proc.poll() is None, "the app exited"
    try:
        return loopback.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@SQLITE
def test_slow_bodies_and_slow_headers_leave_post_runs_answering(backend, tmp_path: Path):
    db_env = {"SQLITE_PATH": os.environ["SQLITE_PATH"]}
    rita = api_key(db_env, "rita", "requester")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    keep = {k: v for k, v in os.environ.items() if k not in settings_to_clear()}
    limits = {k: os.environ[k] for k in os.environ if k.startswith("RATE_LIMIT_")}
    env = {**keep, **db_env, **limits, "WEBHOOK_SECRET": LOCAL_SECRET}
    env.update(HEADER_READ_SECONDS="3", BODY_READ_SECONDS="3")
    log = open(tmp_path / "app.log", "w")  # noqa: SIM115 - closed below
    app = zygote.popen(
        [str(ROOT / ".venv" / "bin" / "approval-worker"), "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    bodies, heads = [], []
    try:
        until(lambda: _healthy(url, app), "the app", 90)
        for _ in range(33):  # each declares 1 MB: 33 MB would pass the 32 MB cap if declared
            sock = connect(port)
            sock.sendall(
                (
                    "POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    f"Authorization: {rita['authorization']}\r\nContent-Length: 1048576\r\n\r\n{{"
                ).encode()
            )
            bodies.append(sock)
        for _ in range(300):
            sock = connect(port)
            sock.sendall(b"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and no more
            heads.append(sock)
        for sock in bodies + heads:
            until(lambda s=sock: read_by_server(port, s), "the server holds the slow request")

        reply = loopback.post(
            f"{url}/runs", json={"input": "Refund order A-1001: broken"}, headers=rita, timeout=60
        )
        assert reply.status_code == 201, reply.text

        assert [status_of(sock) for sock in bodies] == [408] * 33  # the body deadline
        assert [status_of(sock) for sock in heads] == [None] * 300  # closed at the deadline
    finally:
        for sock in bodies + heads:
            sock.close()
        app.terminate()
        app.wait(timeout=60)
        log.close()
