"""A local stand-in for the Slack Web API methods the app calls (``chat.postMessage``,
``chat.update``) on 127.0.0.1, so ``slack_sdk``'s real client runs; and Slack's request signing,
done the way Slack documents it, for interaction payloads."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

from testkit import loopback
from testkit.servers import HOST, free_port, serve_http, stop_http


@dataclass
class SlackStandIn:
    token: str
    port: int = field(default_factory=free_port)
    calls: list[tuple[str, dict]] = field(default_factory=list)
    messages: dict[str, dict] = field(default_factory=dict)  # ts -> the message as shown now
    # None: answer as Slack does; "500": an HTML 500; any other word: Slack's error answer with
    # that code (``ratelimited`` as HTTP 429 with ``Retry-After: 1``)
    failing: str | None = None
    refused: list[tuple[str, dict]] = field(default_factory=list)  # calls answered ``failing``
    # what the app said to pressers through an interaction's ``response_url``: (path, body)
    responses: list[tuple[str, dict]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/api/"

    def response_url(self, name: str) -> str:
        """A press's ``response_url`` (Slack's ``hooks.slack.com/actions/...``), here."""
        return f"http://{HOST}:{self.port}/actions/{name}"

    def told(self, name: str) -> list[str]:
        """The texts the app sent to the press ``name``'s response_url, in order."""
        return [b.get("text", "") for path, b in self.responses if path == f"/actions/{name}"]

    def start(self) -> SlackStandIn:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                if self.path.startswith("/actions/"):  # a response_url: Slack answers "ok"
                    stand_in.responses.append((self.path, body))
                    self.send_response(200)
                    self.send_header("content-length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                    return
                method = self.path.rsplit("/", 1)[-1]
                if stand_in.failing is not None:
                    stand_in.refused.append((method, body))
                    self._fail(str(stand_in.failing))
                    return
                if self.headers.get("authorization") != f"Bearer {stand_in.token}":
                    answer = {"ok": False, "error": "invalid_auth"}
                elif method == "chat.postMessage":
                    ts = f"{time.time():.6f}"
                    stand_in.messages[ts] = body
                    answer = {"ok": True, "channel": body["channel"], "ts": ts}
                elif method == "chat.update" and body.get("ts") in stand_in.messages:
                    stand_in.messages[body["ts"]] = body
                    answer = {"ok": True, "channel": body["channel"], "ts": body["ts"]}
                else:
                    answer = {"ok": False, "error": "unknown_method_or_message"}
                stand_in.calls.append((method, body))
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _fail(self, how: str) -> None:
                status = {"500": 500, "ratelimited": 429}.get(how, 200)
                data = (
                    b"<html>internal error</html>"
                    if how == "500"
                    else json.dumps({"ok": False, "error": how}).encode()
                )
                self.send_response(status)
                self.send_header(
                    "content-type", "text/html" if how == "500" else "application/json"
                )
                if how == "ratelimited":
                    self.send_header("retry-after", "1")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = serve_http(self.port, Handler)
        return self

    def stop(self) -> None:
        if self._server is not None:
            stop_http(self._server)
            self._server = None


def signed_interaction(
    payload: dict, secret: str, at: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """A form-encoded interaction body and the headers Slack sends with it."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(int(at if at is not None else time.time()))
    base = f"v0:{stamp}:".encode() + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": stamp,
        "x-slack-signature": f"v0={digest}",
    }
    return body, headers


def press(message: dict, action_id: str, slack_user: str, response_url: str | None = None) -> dict:
    """The ``block_actions`` payload of pressing a button on a posted message (with the
    ``response_url`` Slack gives every press, when one is named)."""
    buttons = next(b for b in message["blocks"] if b["type"] == "actions")["elements"]
    button = next(b for b in buttons if b["action_id"] == action_id)
    return {
        "type": "block_actions",
        "user": {"id": slack_user, "username": "someone-else", "name": "someone-else"},
        "actions": [{"action_id": action_id, "value": button["value"], "type": "button"}],
    } | ({"response_url": response_url} if response_url else {})


def signed_command(
    slack_user: str, text: str, secret: str, at: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """A ``/approvals`` slash command from ``slack_user``, form-encoded and signed as Slack
    signs it."""
    body = urlencode(
        {"command": "/approvals", "text": text, "user_id": slack_user, "team_id": "T0TEAM"}
    ).encode()
    stamp = str(int(at if at is not None else time.time()))
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": stamp,
        "x-slack-signature": f"v0={digest.hexdigest()}",
    }
    return body, headers


def link_slack(base_url: str, headers: dict, slack_user: str, secret: str) -> dict:
    """Link ``slack_user`` to the reviewer ``headers`` authenticate, both sides as a person does
    it: claim it in the product, then confirm the code from Slack as that Slack user. Returns
    the link (``{"status": "linked", ...}``)."""

    claim = {"slack_user_id": slack_user}
    started = loopback.post(f"{base_url}/me/slack", json=claim, headers=headers, timeout=30)
    if started.status_code == 200:  # linked to them already
        return started.json()
    assert started.status_code == 202, started.text
    body, signed = signed_command(slack_user, started.json()["confirm"].split(None, 1)[1], secret)
    confirmed = loopback.post(
        f"{base_url}/slack/commands", content=body, headers=signed, timeout=30
    )
    assert confirmed.status_code == 200, confirmed.text
    return {"status": "linked", "slack_user_id": slack_user, "reviewer": started.json()["reviewer"]}
