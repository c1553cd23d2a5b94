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
    """True once everything ``client`` sent has left its socket and the server's end has read
    it all (``/proc/net/tcp``: the client's tx_queue and the server socket's rx_queue)."""
    mine = client.getsockname()[1]
    sent = read = False
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)
        tx_queue, rx_queue = (int(q, 16) for q in fields[4].split(":"))
        if (local, remote) == (mine, port):
            sent = tx_queue == 0
        if (local, remote) == (port, mine):
            read = rx_queue == 0
    return sent and read


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
