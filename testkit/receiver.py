"""A local HTTP receiver (``http.server`` on 127.0.0.1) that records what it is sent: stands in
for an operator's alerting endpoint or a Slack incoming webhook. It can be stopped and started
again on the same port, to play a receiver that was down: its port is held (bound, not listening)
from the moment it is made, so nothing else of the run takes it while it is down."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testkit.servers import HOST, free_port, hold_port, serve_http, stop_http


@dataclass
class Received:
    headers: dict[str, str]
    body: str
    at: float = field(default_factory=time.time)  # when it arrived (the bench's latencies)

    @property
    def json(self):
        return json.loads(self.body)


@dataclass
class Receiver:
    port: int = field(default_factory=free_port)
    got: list[Received] = field(default_factory=list)
    keep_alive: bool = False  # HTTP/1.1 with kept connections (to see a sender reuse one)
    _server: ThreadingHTTPServer | None = None
    _held: socket.socket | None = None

    def __post_init__(self) -> None:
        self._held = hold_port(self.port)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/hook"

    def start(self) -> Receiver:
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if self.keep_alive else "HTTP/1.0"

            def do_POST(self):  # noqa: N802 - http.server's name
                size = int(self.headers.get("content-length", 0))
                body = self.rfile.read(size).decode()
                headers = {k.lower(): v for k, v in self.headers.items()}
                headers["x-peer"] = f"{self.client_address[0]}:{self.client_address[1]}"
                got.append(Received(headers, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        held, self._held = self._held or hold_port(self.port), None
        self._server = serve_http(self.port, Handler, held=held)
        return self

    def stop(self) -> None:
        """Stops answering and lets the port go (``start`` takes it again)."""
        if self._server is not None:
            stop_http(self._server)
            self._server = None
        if self._held is not None:
            self._held.close()
            self._held = None
