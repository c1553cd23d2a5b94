"""Access control, as an attacker tries it: every refusal answers its status code in the one
error shape and leaves every table (checkpoints included) exactly as it was.

One app per backend runs under uvicorn with API keys, a JWT provider (a local JWKS server; the
tokens are signed here with a key it publishes), separation of duties and a 2-approver quorum
over 500.00.
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import jwt
import pytest
from conftest import fresh_database
from cryptography.hazmat.primitives.asymmetric import rsa

from api.runs import scoped_thread_id
from testkit import loopback
from testkit.databases import pointed_at
from testkit.servers import serve_http
from testkit.tables import tables
from testkit.wait import past
from testkit.webapp import SECRET, Server, answered_event, api_key, sign, start_server, worker_env

ISSUER, AUDIENCE = "https://id.test/", "approval-worker"
POLICY = {
    "SEPARATION_OF_DUTIES": "1",
    "REFUND_QUORUM_AMOUNT": "500",
    "REFUND_QUORUM": "2",
}


class Jwks:
    """An identity provider's JWKS endpoint on 127.0.0.1, and tokens signed with its key."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = serve_http(0, Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"

    def token(self, sub: str | None = "jo", roles=("reviewer",), *, key=None, **claims) -> str:
        payload = {"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 300, **claims}
        if sub is not None:
            payload["sub"] = sub
        payload["roles"] = list(roles) if isinstance(roles, tuple) else roles  # else: as given
        return jwt.encode(payload, key or self.key, algorithm="RS256", headers={"kid": "k1"})


@dataclass
class Site:
    server: Server
    db_env: dict[str, str]
    jwks: Jwks
    as_: dict[str, dict] = field(default_factory=dict)  # headers by person
    runs: dict[str, dict] = field(default_factory=dict)  # views of the runs made in setup

    @property
    def url(self) -> str:
        return self.server.url

    def call(self, method: str, path: str, who: str | dict | None = None, **kw) -> httpx.Response:
        headers = self.as_[who] if isinstance(who, str) else (who or {})
        return loopback.request(method, self.url + path, headers=headers, timeout=30, **kw)

    def start(self, who: str, text: str, thread_id: str) -> dict:
        reply = self.call("POST", "/runs", who, json={"input": text, "thread_id": thread_id})
        assert reply.status_code == 201, reply.text
        return reply.json()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"access-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    jwks = Jwks()
    with fresh_database(request.param, tmp, pg) as db_env:
        env = worker_env(
            db_env,
            JWT_ISSUER=ISSUER,
            JWT_AUDIENCE=AUDIENCE,
            JWT_JWKS_URL=jwks.url,
            **POLICY,
        )
        server = start_server(env, tmp / "uvicorn.log")
        site = Site(server, db_env, jwks)
        for name, roles in {
            "rita": ("requester",),
            "ron": ("requester",),
            "mia": ("requester", "reviewer"),
            "bob": ("reviewer",),
            "carol": ("reviewer",),
            "olga": ("operator",),
            "ada": ("admin",),
        }.items():
            site.as_[name] = api_key(db_env, name, *roles)
        site.as_["Mia "] = api_key(db_env, "Mia ", "reviewer")  # the requester, another spelling
        revoked = api_key(db_env, "gone", "admin")
        key_id = revoked["authorization"].split("_")[1]
        assert site.call("POST", f"/keys/{key_id}/revoke", "ada").status_code == 200
        site.as_["gone"] = revoked
        site.runs["rita"] = site.start("rita", "Refund order A-1001: broken", "t-rita")
        site.runs["mia"] = site.start("mia", "Refund order A-1002: leaks", "t-mia")
        site.runs["big"] = site.start("rita", "Refund order A-1004: wobbly", "t-big")
        yield site
        server.stop()
    jwks.server.shutdown()


def decision(site: Site, run: str, decisions=None, **override) -> dict:
    approval = site.runs[run]["approval"]
    body = {
        "interrupt_id": approval["interrupt_id"],
        "digest": approval["digest"],
        "decisions": decisions or [{"type": "approve"}],
    }
    return {**body, **override}


def edit(args: dict) -> list[dict]:
    return [{"type": "edit", "edited_action": {"name": "issue_refund", "args": args}}]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def signed(body: str, msg_id: str, secret: str = SECRET) -> dict:
    return sign(body, secret=secret, msg_id=msg_id)


def _lend(delegate: str, days: float = 7) -> dict:
    ends = datetime.now(UTC).timestamp() + days * 86400
    return {
        "json": {"delegate": delegate, "ends_at": datetime.fromtimestamp(ends, UTC).isoformat()}
    }


WEAK = "whsec_" + base64.b64encode(b"a").decode()
RITA = scoped_thread_id("rita", "t-rita")  # the run's id: the name rita chose, in her scope
MIA = scoped_thread_id("mia", "t-mia")
R = f"/runs/{RITA}"
D = f"/runs/{RITA}/decision"
A1001 = {"order_id": "A-1001", "amount": 20.0, "reason": "partial"}

# (name, method, path, who, request kwargs (a callable of the site for run-specific bodies), code)
ATTACKS: list[tuple[str, str, str, Any, Any, int]] = [
    ("no credential", "GET", R, None, {}, 401),
    ("garbage bearer", "GET", R, {"authorization": "Bearer nonsense"}, {}, 401),
    ("malformed key", "GET", R, {"authorization": "Bearer aw_123_short"}, {}, 401),
    ("basic auth", "GET", R, {"authorization": "Basic YWRhOmFkYQ=="}, {}, 401),
    ("revoked key", "GET", R, "gone", {}, 401),
    (
        "wrong secret for a real key id",
        "GET",
        R,
        lambda s: {"authorization": s.as_["ada"]["authorization"][:-6] + "AAAAAA"},
        {},
        401,
    ),
    ("another requester reads a run", "GET", R, "ron", {}, 404),
    ("a requester decides", "POST", D, "rita", lambda s: {"json": decision(s, "rita")}, 403),
    ("a reviewer starts a run", "POST", "/runs", "bob", {"json": {"input": "Refund A-1001"}}, 403),
    ("a reviewer cancels", "POST", f"/runs/{RITA}/cancel", "bob", {}, 403),
    ("a reviewer reads history", "GET", f"/runs/{RITA}/history", "bob", {}, 403),
    ("a requester retries", "POST", f"/runs/{RITA}/retry", "rita", {}, 403),
    ("an operator lists keys", "GET", "/keys", "olga", {}, 403),
    (
        "a reviewer makes itself an admin key",
        "POST",
        "/keys",
        "bob",
        {"json": {"name": "bob2", "roles": ["admin"]}},
        403,
    ),
    ("expired JWT", "GET", R, lambda s: _bearer(s.jwks.token(exp=int(time.time()) - 120)), {}, 401),
    ("JWT for another audience", "GET", R, lambda s: _bearer(s.jwks.token(aud="other")), {}, 401),
    (
        "JWT from another issuer",
        "GET",
        R,
        lambda s: _bearer(s.jwks.token(iss="https://x/")),
        {},
        401,
    ),
    (
        "JWT signed by someone else",
        "GET",
        R,
        lambda s: _bearer(s.jwks.token(key=s.jwks.other, roles=("admin",))),
        {},
        401,
    ),
    (
        "JWT with alg none",
        "GET",
        R,
        lambda s: _bearer(
            jwt.encode(
                {"sub": "x", "iss": ISSUER, "aud": AUDIENCE, "roles": ["admin"]}, None, "none"
            )
        ),
        {},
        401,
    ),
    ("JWT without a user", "GET", R, lambda s: _bearer(s.jwks.token(sub=None)), {}, 401),
    (
        "JWT reviewer starts a run",
        "POST",
        "/runs",
        lambda s: _bearer(s.jwks.token()),
        {"json": {"input": "Refund order A-1003"}},
        403,
    ),
    (
        "decided_by in the body",
        "POST",
        D,
        "bob",
        lambda s: {"json": decision(s, "rita", decided_by="alice")},
        422,
    ),
    (
        "requested_by in the body",
        "POST",
        "/runs",
        "rita",
        {"json": {"input": "Refund order A-1003: x", "requested_by": "someone"}},
        422,
    ),
    (
        "self-approval",
        "POST",
        f"/runs/{MIA}/decision",
        "mia",
        lambda s: {"json": decision(s, "mia")},
        403,
    ),
    (
        "self-approval in another spelling",
        "POST",
        f"/runs/{MIA}/decision",
        "Mia ",
        lambda s: {"json": decision(s, "mia")},
        403,
    ),
    (
        "self-approval by edit",
        "POST",
        f"/runs/{MIA}/decision",
        "mia",
        lambda s: {"json": decision(s, "mia", edit({**A1001, "order_id": "A-1002"}))},
        403,
    ),
    (
        "stale digest",
        "POST",
        D,
        "bob",
        lambda s: {"json": decision(s, "rita", digest="0" * 32)},
        409,
    ),
    (
        "another interrupt",
        "POST",
        D,
        "bob",
        lambda s: {"json": decision(s, "rita", interrupt_id="not-the-one")},
        409,
    ),
    (
        "unknown run",
        "POST",
        "/runs/t-nope/decision",
        "bob",
        lambda s: {"json": decision(s, "rita")},
        404,
    ),
    (
        "edit changes the order",
        "POST",
        D,
        "bob",
        lambda s: {"json": decision(s, "rita", edit({**A1001, "order_id": "A-1004"}))},
        422,
    ),
    (
        "edit nested 300 deep",
        "POST",
        D,
        "bob",
        lambda s: {"json": decision(s, "rita", edit({**A1001, "reason": json.loads(nested(300))}))},
        422,
    ),
    (
        "edit with a NUL",
        "POST",
        D,
        "bob",
        lambda s: {"json": decision(s, "rita", edit({**A1001, "reason": "a\x00b"}))},
        422,
    ),
    (
        "import sys:addaudithook",
        "POST",
        "/runs",
        "rita",
        {"json": {"input": "x", "workflow": "sys:addaudithook"}},
        422,
    ),
    (
        "import builtins:print",
        "POST",
        "/runs",
        "rita",
        {"json": {"input": "x", "workflow": "builtins:print"}},
        422,
    ),
    (
        "run venv.__main__",
        "POST",
        "/runs",
        "rita",
        {"json": {"input": "x", "workflow": "venv.__main__:x"}},
        422,
    ),
    (
        "expires_in NaN",
        "POST",
        "/runs",
        "rita",
        {"content": b'{"input": "Refund A-1003", "expires_in": NaN}'},
        422,
    ),
    (
        "expires_in Infinity",
        "POST",
        "/runs",
        "rita",
        {"content": b'{"input": "Refund A-1003", "expires_in": Infinity}'},
        422,
    ),
    (
        "expires_in 1e308",
        "POST",
        "/runs",
        "rita",
        {"json": {"input": "Refund A-1003", "expires_in": 1e308}},
        422,
    ),
    ("a 1 MB input", "POST", "/runs", "rita", {"json": {"input": "x" * 1_000_000}}, 422),
    ("a 2 MiB body", "POST", "/runs", "rita", {"content": b" " * (2 * 1024 * 1024)}, 413),
    (
        "a lone surrogate in input",
        "POST",
        "/runs",
        "rita",
        {"content": b'{"input": "a\\ud800b"}'},
        422,
    ),
    ("a NUL in input", "POST", "/runs", "rita", {"content": b'{"input": "a\\u0000b"}'}, 422),
    (
        "a NUL in a cancel reason",
        "POST",
        f"/runs/{RITA}/cancel",
        "olga",
        {"content": b'{"reason": "a\\u0000b"}'},
        422,
    ),
    ("a NUL in the path", "GET", f"/runs/{RITA}%00", "olga", {}, 404),
    ("a lone surrogate in the path", "GET", "/runs/t-%ED%A0%80", "olga", {}, 404),
    ("JSON 100k deep", "POST", "/runs", "rita", {"content": nested(100_000).encode()}, 422),
    (
        "a signed webhook 100k deep",
        "POST",
        "/webhooks/vigilator",
        None,
        lambda s: {"content": nested(100_000), "headers": signed(nested(100_000), "m-deep")},
        422,
    ),
    (
        "a webhook signed with a 1-byte secret",
        "POST",
        "/webhooks/vigilator",
        None,
        lambda s: _answer(s, "m-weak", WEAK),
        400,
    ),
    (
        "a webhook to an unknown source",
        "POST",
        "/webhooks/github",
        None,
        lambda s: _answer(s, "m-gh"),
        404,
    ),
    (
        "a replayed webhook",
        "POST",
        "/webhooks/vigilator",
        None,
        lambda s: _answer(s, "m-seen"),
        200,
    ),
    (
        "NaN in a decision",
        "POST",
        D,
        "bob",
        {
            "content": b'{"interrupt_id": "x", "digest": "y", '
            b'"decisions": [{"type": "edit", "x": NaN}]}'
        },
        422,
    ),
    ("an unknown role", "POST", "/keys", "ada", {"json": {"name": "x", "roles": ["root"]}}, 422),
    # issue 22: the adversarial review's findings
    *[
        (
            f"JWT roles claim {raw!r}",
            "GET",
            R,
            lambda s, raw=raw: _bearer(s.jwks.token(roles=raw)),
            {},
            401,
        )
        for raw in ({"admin": False}, "admin", 5, [["admin"]])
    ],
    ("JWT user with U+202E", "GET", R, lambda s: _bearer(s.jwks.token(sub="ri\u202eta")), {}, 401),
    (
        "key name with U+202E",
        "POST",
        "/keys",
        "ada",
        {"json": {"name": "a\u202eb", "roles": ["reviewer"]}},
        422,
    ),
    (
        "key name with a zero-width space",
        "POST",
        "/keys",
        "ada",
        {"json": {"name": "ri\u200bta", "roles": ["reviewer"]}},
        422,
    ),
    (
        "key name of two people",
        "POST",
        "/keys",
        "ada",
        {"json": {"name": "rita, alice", "roles": ["reviewer"]}},
        422,
    ),
    ("a NUL in ?workflow=", "GET", "/inbox?workflow=a%00b", None, {}, 422),
    ("a NUL in ?after=", "GET", "/inbox?after=1,a%00b", None, {}, 422),
    ("a NUL in a request page", "GET", f"/inbox/requests/{RITA}%00", None, {}, 404),
    ("a NUL in a key to revoke", "POST", "/keys/abc%00/revoke", "ada", {}, 404),
    ("a 10 KB query", "GET", "/inbox?workflow=" + "x" * 10_000, None, {}, 414),
    (
        "an edit with a field the tool does not have",
        "POST",
        D,
        "bob",
        lambda s: {"json": decision(s, "rita", edit({**A1001, "customer": "evil"}))},
        422,
    ),
    (
        "an approve carrying an edited_action",
        "POST",
        D,
        "bob",
        lambda s: {
            "json": decision(
                s,
                "rita",
                [{"type": "approve", "edited_action": {"name": "issue_refund", "args": A1001}}],
            )
        },
        422,
    ),
    (
        "a webhook decider with a zero-width space",
        "POST",
        "/webhooks/vigilator",
        None,
        lambda s: _answer(s, "m-zw", decided_by="ri\u200bta"),
        422,
    ),
    ("an unauthenticated 1 MB body", "POST", "/runs", None, {"content": b" " * 1_000_000}, 401),
    # issue 25: delegation
    ("a delegation without a credential", "POST", "/me/delegations", None, _lend("carol"), 401),
    ("a requester delegates", "POST", "/me/delegations", "rita", _lend("bob"), 403),
    ("an operator lists delegations", "GET", "/me/delegations", "olga", {}, 403),
    ("a delegation to yourself", "POST", "/me/delegations", "bob", _lend(" BOB "), 422),
    ("a delegation to two people", "POST", "/me/delegations", "bob", _lend("carol, mia"), 422),
    ("a delegation with U+202E", "POST", "/me/delegations", "bob", _lend("ca\u202erol"), 422),
    ("a delegation that ended", "POST", "/me/delegations", "bob", _lend("carol", -1), 422),
    ("a delegation for a year", "POST", "/me/delegations", "bob", _lend("carol", 365), 422),
    (
        "a delegation without a time zone",
        "POST",
        "/me/delegations",
        "bob",
        {"json": {"delegate": "carol", "ends_at": "2099-01-01T00:00:00"}},
        422,
    ),
    (
        "a delegation that grants itself groups",
        "POST",
        "/me/delegations",
        "bob",
        {"json": {**_lend("carol")["json"], "groups": ["finance"]}},
        422,
    ),
    ("revoke an unknown delegation", "POST", "/me/delegations/abc/revoke", "bob", {}, 404),
    ("revoke with a NUL", "POST", "/me/delegations/a%00b/revoke", "bob", {}, 404),
    (
        "a decision for someone who never delegated",
        "POST",
        D,
        "bob",
        lambda s: {"json": decision(s, "rita", on_behalf_of="carol")},
        403,
    ),
    (
        "a decision for someone with a NUL",
        "POST",
        D,
        "bob",
        lambda s: {"json": decision(s, "rita", on_behalf_of="ca\x00rol")},
        422,
    ),
    (
        "a decision for two people",
        "POST",
        D,
        "bob",
        lambda s: {"json": decision(s, "rita", on_behalf_of="carol, mia")},
        422,
    ),
    # a chosen thread id is the requester's own: nobody else's name, run id or existence
    ("another requester's chosen name", "GET", "/runs/t-rita", "ron", {}, 404),
    ("a chosen name without its scope, by its chooser", "GET", "/runs/t-rita", "rita", {}, 404),
    ("another requester's run id", "GET", R, "ron", {}, 404),
    (
        "a chosen thread id past 128 characters",
        "POST",
        "/runs",
        "ron",
        {"json": {"input": "hello", "thread_id": "t" * 129}},
        422,
    ),
    (
        "a chosen thread id with a slash",
        "POST",
        "/runs",
        "ron",
        {"json": {"input": "hello", "thread_id": f"../{RITA}"}},
        422,
    ),
]


def _bearer(token: str) -> dict:
    return {"authorization": f"Bearer {token}"}


def _answer(site: Site, msg_id: str, secret: str = SECRET, decided_by: str | None = None) -> dict:
    approval = site.runs["rita"]["approval"]
    item = {"name": "issue_refund", "decision": "reject", "responseText": "no"}
    if decided_by is not None:
        item = {"name": "issue_refund", "decision": "approve", "decidedByName": decided_by}
    body = answered_event(approval["interrupt_id"], RITA, [item])
    return {"content": body, "headers": signed(body, msg_id, secret)}


@pytest.fixture(scope="module")
def replay_seen(site):
    """A delivery handled once (an escalation: recorded, changes no run) to replay later."""
    body = json.dumps(
        {"type": "interrupt.escalated", "data": {"externalId": f"approval-worker:{RITA}"}}
    )
    first = loopback.post(
        f"{site.url}/webhooks/vigilator", content=body, headers=signed(body, "m-seen"), timeout=30
    )
    assert first.status_code == 200 and first.json()["status"] == "recorded"
    return site


@pytest.mark.parametrize(
    ("name", "method", "path", "who", "kwargs", "code"), ATTACKS, ids=[a[0] for a in ATTACKS]
)
def test_an_attack_is_refused_and_changes_nothing(
    replay_seen, name, method, path, who, kwargs, code
):
    site = replay_seen
    before = tables(site.db_env)
    who = who(site) if callable(who) else who
    kwargs = kwargs(site) if callable(kwargs) else dict(kwargs)
    headers = {
        **(site.as_[who] if isinstance(who, str) else who or {}),
        **kwargs.pop("headers", {}),
    }
    reply = loopback.request(method, site.url + path, headers=headers, timeout=60, **kwargs)
    assert reply.status_code == code, (name, reply.text[:500])
    if code >= 400:
        error = reply.json()["error"]
        assert set(error) - {"details"} == {"code", "message"} and error["message"], reply.text
    else:
        assert reply.json()["status"] == "ignored"
    assert tables(site.db_env) == before, f"{name} changed a table"


def test_a_chosen_thread_id_is_the_requesters_own(site):
    """Ron choosing the name of rita's run gets a run of his own, answered exactly as for a
    name nobody holds: a chosen name neither tells whether another's exists nor takes it."""

    def start(who: str, thread_id: str) -> httpx.Response:
        return site.call("POST", "/runs", who, json={"input": "hello", "thread_id": thread_id})

    taken, fresh = start("ron", "t-rita"), start("ron", "t-unheard-of")
    assert taken.status_code == fresh.status_code == 201, (taken.text, fresh.text)
    assert set(taken.json()) == set(fresh.json())
    assert taken.json()["thread_id"] == scoped_thread_id("ron", "t-rita") != RITA
    assert fresh.json()["thread_id"] == scoped_thread_id("ron", "t-unheard-of")
    assert taken.json()["requested_by"] == "ron"
    rita = site.call("GET", R, "olga").json()
    assert (rita["status"], rita["requested_by"]) == ("waiting", "rita")
    again = start("ron", "t-rita")  # asking again answers the same run, for each requester
    assert again.status_code == 200 and again.json()["thread_id"] == taken.json()["thread_id"]
    own = start("rita", "t-rita")
    assert own.status_code == 200 and own.json()["thread_id"] == RITA
    probe = start("ron", RITA)  # rita's run id as a name: one more run of ron's
    assert probe.status_code == 201 and probe.json()["thread_id"] == scoped_thread_id("ron", RITA)
    assert site.call("GET", f"/runs/{probe.json()['thread_id']}", "rita").status_code == 404


def test_there_are_at_least_forty_attacks():
    assert len(ATTACKS) >= 40


def test_a_decision_carries_the_callers_identity_and_the_quorum_counts_reviewers(site):
    big = decision(site, "big")
    big_id = site.runs["big"]["thread_id"]
    path = f"/runs/{big_id}/decision"
    first = site.call("POST", path, "bob", json=big)
    assert first.status_code == 202 and first.json()["status"] == "approval recorded"
    assert first.json()["approvers"] == ["bob"] and first.json()["quorum"] == 2
    again = site.call("POST", path, "bob", json=big)
    assert again.status_code == 409 and again.json()["error"]["code"] == "repeated"
    assert site.call("GET", f"/runs/{big_id}", "olga").json()["status"] == "waiting"
    second = site.call("POST", path, "carol", json=big)
    assert second.status_code == 202 and second.json()["status"] == "accepted", second.text
    done = _wait(site, big_id, "done")
    assert "Refunded 540.00 EUR" in done["result"]
    events = site.call("GET", f"/runs/{big_id}/history", "olga").json()["events"]
    [claim] = [e for e in events if e["reason"] == "decision claimed"]
    assert claim["detail"]["approvers"] == ["bob", "carol"]


def _propose_less(site: Site, thread_id: str, amount: float) -> dict:
    """The waiting run now proposes ``amount`` (below the quorum amount), as a partial refund
    the agent could have proposed; the request, its digest and its quorum follow. Nothing is
    refunded on its order yet (other tests share the demo orders; edits are checked against
    what is still refundable)."""
    from core.hitl import HitlRequest
    from store.db import open_store

    with pointed_at(site.db_env), open_store() as store:
        row = store.db.one("SELECT request FROM runs WHERE thread_id = :t", {"t": thread_id})
        request = json.loads(row["request"])
        request["action_requests"][0]["args"]["amount"] = amount
        order = request["action_requests"][0]["args"]["order_id"]
        store.db.execute("DELETE FROM refunds WHERE order_id = :o", {"o": order})
        store.db.execute("DELETE FROM order_balances WHERE order_id = :o", {"o": order})
        store.db.execute(
            "UPDATE runs SET request = :r, request_digest = :d, quorum = 1 WHERE thread_id = :t",
            {"r": json.dumps(request), "d": HitlRequest.parse(request).digest(), "t": thread_id},
        )
    return site.call("GET", f"/runs/{thread_id}", "olga").json()


def test_an_edit_over_the_quorum_amount_needs_the_quorum(site):
    from agent.ledger import Ledger
    from store.db import open_store

    with pointed_at(site.db_env), open_store() as store:  # t-big refunded A-1004 earlier
        Ledger(store.db).clear()
    edit_up = site.start("ron", "Refund order A-1004: only the legs", "t-edit-up")["thread_id"]
    site.runs["edit-up"] = _propose_less(site, edit_up, 100.0)
    raised = decision(site, "edit-up", edit({"order_id": "A-1004", "amount": 520.0, "reason": "x"}))
    first = site.call("POST", f"/runs/{edit_up}/decision", "bob", json=raised)
    assert first.status_code == 202 and first.json()["quorum"] == 2, first.text
    assert site.call("GET", f"/runs/{edit_up}", "olga").json()["status"] == "waiting"
    second = site.call("POST", f"/runs/{edit_up}/decision", "carol", json=raised)
    assert second.json()["status"] == "accepted", second.text
    _wait(site, edit_up, "done")


def _wait(site: Site, thread_id: str, status: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        view = site.call("GET", f"/runs/{thread_id}", "olga").json()
        if view["status"] == status:
            return view
        time.sleep(0.05)  # polls until the run has the status (deadline above)
    raise AssertionError(f"{thread_id} never became {status}: {view}")


def test_webhook_deciders_are_each_counted_and_the_requester_is_refused(site):
    view = site.start("rita", "Refund order A-1005: no sound", "t-two")
    two = view["thread_id"]
    interrupt_id = view["approval"]["interrupt_id"]
    both = [
        {"name": "issue_refund", "decision": "approve", "decidedByName": "rita"},
    ]
    body = answered_event(interrupt_id, two, both)
    reply = loopback.post(
        f"{site.url}/webhooks/vigilator", content=body, headers=signed(body, "m-two"), timeout=30
    )
    assert reply.json()["status"] == "ignored" and "may not approve" in reply.json()["reason"]
    anonymous = answered_event(interrupt_id, two, [{"name": "issue_refund", "decision": "approve"}])
    reply = loopback.post(
        f"{site.url}/webhooks/vigilator",
        content=anonymous,
        headers=signed(anonymous, "m-anon"),
        timeout=30,
    )
    assert reply.json()["status"] == "ignored" and "must name who decided" in reply.json()["reason"]
    assert site.call("GET", f"/runs/{two}", "olga").json()["status"] == "waiting"


def test_the_openapi_schema_documents_security_and_errors(site):
    schema = loopback.get(f"{site.url}/openapi.json").json()
    assert "HTTPBearer" in schema["components"]["securitySchemes"]
    decide = schema["paths"]["/runs/{thread_id}/decision"]["post"]
    assert {"401", "403", "404", "409", "410", "422"} <= set(decide["responses"])
    assert datetime.now(UTC)  # the schema is served without a credential


def test_every_refusal_has_one_status():
    from api.errors import REFUSAL_STATUS
    from worker.refusals import Refusal

    assert set(REFUSAL_STATUS) == set(Refusal)


def test_a_secret_is_scrubbed_in_any_piece_and_any_case(monkeypatch):
    from core.errors import scrub

    monkeypatch.setenv("DATABASE_URL", "postgresql://app:S3cret PW@@127.0.0.1/db")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz")
    assert scrub('unexpected spaces found in "S3cret PW"') == 'unexpected spaces found in "***"'
    assert "ABCDEFGH" not in scrub("key SK-ANT-API03-ABCDEFGHIJKLMNOPQRSTUVWXYZ upper")
    assert "abcdefgh" not in scrub("key sk-ant-api03-abcdefghijklmnopqrstuvwxy cut short")
    assert scrub("refund order A-1001") == "refund order A-1001"


@pytest.mark.parametrize("name", ["ri\u200bta", "a\u202eb", "rita, alice", "bob\n", "x\u2028y"])
def test_a_name_with_an_invisible_or_separator_character_is_refused(name):
    from core.errors import UserError
    from core.identity import identity_key
    from core.limits import check_name

    with pytest.raises(UserError):
        check_name(name)
    assert identity_key("ri\u200bta") == identity_key("RITA") == identity_key("ｒｉｔａ")


def _browser(site: Site, credential: str) -> tuple[httpx.Client, httpx.Response]:
    """A browser of the web inbox (its own cookies) after posting ``credential`` to sign in."""
    browser = httpx.Client(base_url=site.url, timeout=30)
    token = re.search(r'name="csrf" value="([^"]+)"', browser.get("/inbox/login").text)
    form = {"csrf": token[1] if token else "", "credential": credential, "next": "/inbox"}
    return browser, browser.post("/inbox/login", data=form)


def _session_seconds(reply: httpx.Response) -> int:
    cookie = next(c for c in reply.headers.get_list("set-cookie") if c.startswith("aw_session="))
    found = re.search(r"Max-Age=(\d+)", cookie, re.IGNORECASE)
    assert found, cookie
    return int(found[1])


def test_a_jwt_web_session_ends_with_its_token(site):
    """A 40-second JWT signs in for 40 seconds, not ``SESSION_HOURS``; once the token's time is
    up the session is gone on the server too (the cookie replayed by hand is not let in)."""
    _, reply = _browser(site, site.jwks.token(sub="jo40", exp=int(time.time()) + 40))
    assert reply.status_code == 303 and 30 <= _session_seconds(reply) <= 40
    key = _browser(site, site.as_["bob"]["authorization"].removeprefix("Bearer "))[1]
    assert _session_seconds(key) >= 3600  # an API key's session lasts SESSION_HOURS
    # long enough that a loaded machine still holds the cookie after signing in (a 2 s token
    # had expired in the client by then: the CI flake); the wait below is for its exp alone
    exp = int(time.time()) + 8
    browser, reply = _browser(site, site.jwks.token(sub="jo8", exp=exp))
    assert reply.status_code == 303 and _session_seconds(reply) <= 8
    session = browser.cookies["aw_session"]
    assert browser.get("/inbox").status_code == 200
    # the token is within the verifier's leeway still; its session (cut at exp) is not
    past(exp + 0.5, "the session's end (the token's exp) in the server")
    late = loopback.get(f"{site.url}/inbox", cookies={"aw_session": session}, timeout=30)
    assert late.status_code == 303 and late.headers["location"].startswith("/inbox/login")


@pytest.mark.parametrize(
    ("reason", "says"),
    [("a\x00b", "contains a NUL character"), ("x" * 2001, "longer than 2000 characters")],
    ids=["nul", "over-max-text-chars"],
)
def test_a_web_cancel_reason_is_bounded_and_nul_safe(site, reason, says):
    browser, reply = _browser(site, site.as_["olga"]["authorization"].removeprefix("Bearer "))
    assert reply.status_code == 303
    page = browser.get("/inbox/runs?status=failed")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf, page.text[:500]
    before = tables(site.db_env)
    form = {"csrf": csrf[1], "reason": reason, "back": "failed"}
    refused = browser.post(f"/inbox/runs/{RITA}/cancel", data=form)
    assert refused.status_code == 422 and says in refused.text, refused.text[:500]
    assert tables(site.db_env) == before
    assert site.call("GET", R, "olga").json()["status"] == "waiting"
