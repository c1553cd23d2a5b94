"""A local stand-in for the Claude Messages API, so the real ``anthropic`` client runs against it.

It serves ``POST /v1/messages`` on 127.0.0.1 from a script (a function of the request body),
records every request (body and headers), and can answer with Anthropic's JSON error shape
first (``queue``) or always (``fail_with``). Error replies carry ``retry-after-ms: 1`` so the
SDK's own retry loop runs at full speed.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testkit.servers import stop_http

Reply = tuple[int, dict, dict]


def message(blocks: list[dict], stop_reason: str | None = None) -> Reply:
    stop = stop_reason or (
        "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    )
    body = {
        "id": f"msg_{uuid.uuid4().hex[:20]}",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    return 200, body, {}


def text(value: str) -> Reply:
    return message([{"type": "text", "text": value}])


def tool_use(name: str, input_: Any, note: str = "") -> Reply:
    blocks = [{"type": "text", "text": note}] if note else []
    blocks.append(
        {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": name, "input": input_}
    )
    return message(blocks)


def error(status: int, kind: str, text_: str) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": text_}, "request_id": "req_test"}
    return status, body, {"request-id": "req_test", "retry-after-ms": "1"}


def tool_results(body: dict) -> list[dict]:
    """The ``tool_result`` blocks of the request's last (user) turn."""
    content = body["messages"][-1]["content"]
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def tool_uses(turn: dict) -> dict[str, dict]:
    return {b["id"]: b for b in turn["content"] if b.get("type") == "tool_use"}


def refund_agent(body: dict) -> Reply:
    """Claude as a refund agent: look the order up, propose the refund, report what happened."""
    results = tool_results(body)
    if not results:
        first = body["messages"][0]["content"]
        asked = first if isinstance(first, str) else first[0]["text"]
        return tool_use("lookup_order", {"order_id": re.search(r"A-\d{4}", asked).group()})
    uses = tool_uses(body["messages"][-2])
    name = uses[results[0]["tool_use_id"]]["name"]
    if name == "lookup_order":
        order = json.loads(results[0]["content"])
        args = {"order_id": order["order_id"], "amount": order["total"], "reason": "broken"}
        return tool_use("issue_refund", args, note="The order qualifies; proposing the refund.")
    return text(f"Claude says: {results[0]['content']}")


class FakeClaude:
    def __init__(self, script: Callable[[dict], Reply] = refund_agent):
        self.script = script
        self.requests: list[dict] = []
        self.queue: list[Reply] = []
        self.fail_with: Reply | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append(
                    {"path": self.path, "body": body, "headers": dict(self.headers)}
                )
                if self.path != "/v1/messages":
                    status, payload, headers = error(404, "not_found_error", "no such path")
                elif fake.queue:
                    status, payload, headers = fake.queue.pop(0)
                elif fake.fail_with is not None:
                    status, payload, headers = fake.fail_with
                else:
                    status, payload, headers = fake.script(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeClaude:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        stop_http(self.server)

    def bodies(self) -> list[dict]:
        return [r["body"] for r in self.requests]
