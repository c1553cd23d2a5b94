"""Raw HTTP on 127.0.0.1 for the tests of slow clients and of stopping: a request sent by hand,
and whether the server has read what was sent (its socket's receive queue is empty), so a test
acts once the server holds the request, with no sleep."""

from __future__ import annotations

import socket
from pathlib import Path

HOST = "127.0.0.1"


def connect(port: int) -> socket.socket:
    return socket.create_connection((HOST, port), timeout=60)


def read_by_server(port: int, client: socket.socket) -> bool:
    """True once the server's end of ``client``'s connection has nothing left unread
    (``/proc/net/tcp``: the server socket's rx_queue)."""
    mine = client.getsockname()[1]
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, queues = fields[1], fields[2], fields[4]
        if int(local.split(":")[1], 16) == port and int(remote.split(":")[1], 16) == mine:
            return int(queues.split(":")[1], 16) == 0
    return False


def get(port: int, path: str, headers: dict[str, str]) -> socket.socket:
    """Send ``GET path`` and leave the answer to :func:`status_of`."""
    client = connect(port)
    lines = [f"GET {path} HTTP/1.1", f"Host: {HOST}:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    client.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return client


def status_of(client: socket.socket) -> int | None:
    """The answer's status code, or None when the server closed without one."""
    data = b""
    with client:
        while chunk := client.recv(65536):
            data += chunk
    if not data.startswith(b"HTTP/1.1 "):
        return None
    return int(data.split()[1])
