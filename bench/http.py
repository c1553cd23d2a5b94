"""A deliberately tiny HTTP/1.1 load generator, and uvicorn servers to point it at.

The load generator shares two cores with the server and Postgres, so it must cost next to
nothing per request: bodies are signed before the clock starts, and requests go over raw asyncio
streams with keep-alive instead of a full HTTP client. The schedule is open-loop (request ``i``
is due at ``start + i / rate`` whether or not earlier ones were answered) and latency is counted
from the due time, so a server that falls behind shows it instead of slowing the sender down.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.common import CENT, SECRET
from testkit.servers import HOST, Server
from testkit.servers import start_server as testkit_start_server
from testkit.webapp import answered_event


def start_server(
    app: str, env: dict[str, str], log_path: Path, *, workers: int = 1, timeout: float = 90
) -> Server:
    """``uvicorn <app>`` on 127.0.0.1 with the same flags for the worker and for the floor."""
    return testkit_start_server(
        env, log_path, app=app, workers=workers, access_log=False, timeout=timeout
    )


async def _get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), 2)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nhost: {HOST}\r\nconnection: close\r\n\r\n".encode())
        return await asyncio.wait_for(_read_response(reader), 5)
    finally:
        writer.close()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return status, body


# -- signed deliveries ---------------------------------------------------------------------------


def signed_request(path: str, body: str, msg_id: str) -> bytes:
    """The whole request, signed now: good for the ±5 minutes Svix tolerates."""
    from svix.webhooks import Webhook

    at = datetime.now(UTC)
    payload = body.encode()
    headers = {
        "host": HOST,
        "content-type": "application/json",
        "content-length": str(len(payload)),
        "svix-id": msg_id,
        "svix-timestamp": str(int(at.timestamp())),
        "svix-signature": Webhook(SECRET).sign(msg_id, at, body),
    }
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"\r\n" + payload


def answered_body(interrupt_id: str, thread_id: str, app: str = "approval-worker") -> str:
    """A Vigilator-shaped ``interrupt.answered`` approving the one proposed refund as the
    bench's one-cent edit (``DECISION``, as the raw floor resumes): an approval of the whole
    amount is refused once anything was refunded on the order (``check_edit``), and every
    section's runs share the one order."""
    item = {
        "name": "issue_refund",
        "decision": "edit",
        "editedArgs": CENT,
        "decidedByName": "bench",
    }
    return answered_event(interrupt_id, thread_id, [item], app)


# -- sending -----------------------------------------------------------------------------------


@dataclass
class Shot:
    due: float  # seconds after the schedule's start
    latency: float = float("nan")  # seconds from due to the last byte of the response
    late: float = 0.0  # how late the sender itself was (a sender too slow to keep the schedule)
    status: int = 0
    body: bytes = b""
    sent_at: float = 0.0  # wall clock (time.time) when the request was sent


class _Connections:
    """Idle keep-alive connections; a new one is opened whenever all are busy (open loop).

    uvicorn closes a connection after 5 s idle (``--timeout-keep-alive``), so idle ones older
    than ``max_idle`` are dropped rather than reused, and a reused one the server closed anyway
    is replaced once, as any HTTP client does.
    """

    def __init__(self, port: int, max_idle: float = 3.0):
        self.port = port
        self.max_idle = max_idle
        self.idle: list[tuple[float, asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.opened = 0

    async def take(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        now = time.monotonic()
        while self.idle:
            since, reader, writer = self.idle.pop()
            if now - since < self.max_idle:
                return reader, writer, True
            writer.close()
        self.opened += 1
        reader, writer = await asyncio.open_connection(HOST, self.port)
        return reader, writer, False

    def give(self, reader, writer) -> None:
        self.idle.append((time.monotonic(), reader, writer))

    async def request(self, data: bytes) -> tuple[int, bytes]:
        for attempt in (1, 2):
            reader, writer, reused = await self.take()
            try:
                writer.write(data)
                answer = await _read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
                if not reused or attempt == 2:
                    raise
                continue
            self.give(reader, writer)
            return answer
        raise AssertionError("unreachable")

    def close(self) -> None:
        for _, _, writer in self.idle:
            writer.close()


async def _open_loop(port: int, requests: list[bytes], rate: float, timeout: float) -> list[Shot]:
    loop = asyncio.get_running_loop()
    conns = _Connections(port)
    shots = [Shot(due=i / rate) for i in range(len(requests))]
    start = loop.time() + 0.2

    async def fire(i: int) -> None:
        shot = shots[i]
        await asyncio.sleep(max(0.0, start + shot.due - loop.time()))
        shot.late = loop.time() - (start + shot.due)
        shot.sent_at = time.time()
        shot.status, shot.body = await conns.request(requests[i])
        shot.latency = loop.time() - (start + shot.due)

    tasks = [asyncio.ensure_future(fire(i)) for i in range(len(requests))]
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    conns.close()
    for task in done:
        if task.exception() is not None:
            raise task.exception()
    if pending:
        raise RuntimeError(f"{len(pending)} of {len(requests)} requests unanswered in {timeout}s")
    return shots


def open_loop(port: int, requests: list[bytes], rate: float) -> list[Shot]:
    """Send ``requests`` at ``rate`` per second on schedule; bounded by the schedule plus 60 s."""
    return asyncio.run(_open_loop(port, requests, rate, len(requests) / rate + 60))


async def _closed(port: int, requests: list[bytes], concurrency: int) -> list[int]:
    conns = _Connections(port)
    statuses: list[int] = [0] * len(requests)
    queue = list(range(len(requests)))[::-1]

    async def worker() -> None:
        while queue:
            i = queue.pop()
            statuses[i], _ = await conns.request(requests[i])

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), 600)
    conns.close()
    return statuses


def send_all(port: int, requests: list[bytes], concurrency: int = 8) -> list[int]:
    """Send as fast as ``concurrency`` connections allow; returns the status codes."""
    return asyncio.run(_closed(port, requests, concurrency))
