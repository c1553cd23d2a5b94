"""E-mail links decide through the one decision path: the worker's real ``smtplib`` client sends
to a local SMTP server (``aiosmtpd``), and the links in the mail are opened and posted over real
HTTP on 127.0.0.1 against uvicorn. Opening a link changes nothing; its page's POST decides once,
for its reviewer and request only, until the request expires."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import threading
import time
from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from conftest import fresh_database, settings_to_clear

from agent.ledger import Ledger
from ops import mail
from ops.shown import Shown
from store.db import open_store
from testkit import loopback
from testkit.mail import MailBox, links, text_of
from testkit.wait import past
from testkit.webapp import Server, api_key, free_port, start_server, wait_for_status, worker_env
from worker.runner import Runner

SECRET = "link-secret-for-tests-0123456789abcdef"
POLICY = {"SEPARATION_OF_DUTIES": "1", "REFUND_QUORUM_AMOUNT": "500", "REFUND_QUORUM": "2"}
ADDRESS = {n: f"{n}@example.test" for n in ("bob", "carol", "rita", "opal")}
# The rate limiter's counters record attempts, refused ones included (docs/limits.md): the one
# table a refusal moves.
COUNTERS = {"rate_limits"}
HTML = {"accept": "text/html,application/xhtml+xml"}


@dataclass
class App:
    server: Server
    db_env: dict[str, str]
    box: MailBox
    env: dict[str, str]
    keys: dict[str, dict]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def app(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"mail-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    box = MailBox().start()
    port = free_port()
    env = {
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(box.port),
        "SMTP_TLS": "none",
        "EMAIL_FROM": "Approvals <approvals@example.test>",
        "EMAIL_LINK_SECRET": SECRET,
        "PUBLIC_URL": f"http://127.0.0.1:{port}",
        **POLICY,
    }
    with fresh_database(request.param, tmp, pg) as db_env:
        server = start_server(worker_env(db_env, **env), tmp / "uvicorn.log", port=port)
        keys = {n: api_key(db_env, n, "reviewer", email=ADDRESS[n]) for n in ("bob", "carol")}
        keys["rita"] = api_key(db_env, "rita", "reviewer", "requester", email=ADDRESS["rita"])
        keys["dave"] = api_key(db_env, "dave", "reviewer")  # no address: no mail
        keys["opal"] = api_key(db_env, "opal", "operator", email=ADDRESS["opal"])  # not a reviewer
        yield App(server, db_env, box, env, keys)
        server.stop()
    box.stop()


@pytest.fixture
def runner(app, monkeypatch, tmp_path):
    for name in settings_to_clear():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    for name, value in {**app.db_env, **app.env}.items():
        monkeypatch.setenv(name, value)
    with open_store() as store:
        Ledger(store.db).clear()  # the module's tests share a database and its demo orders
        yield Runner(store)


def mailed(app: App, runner: Runner, thread_id: str, order: str = "A-1001", **kw) -> dict:
    """Start a refund that waits for approval; each reviewer's links, by name."""
    outcome = runner.start(
        f"Refund order {order}: arrived broken", thread_id=thread_id, requested_by="rita", **kw
    )
    assert outcome.status == "waiting", outcome
    mail.drain()
    return {n: links(app.box.wait_for(ADDRESS[n], thread_id)) for n in ("bob", "carol")}


def token_of(url: str) -> str:
    return parse_qs(urlparse(url).query)["token"][0]


def open_link(url: str, **headers: str) -> httpx.Response:
    return loopback.get(url, headers=headers, timeout=30)


def use(app: App, token: str, reason: str = "", **headers: str) -> httpx.Response:
    form = {"token": token, **({"reason": reason} if reason else {})}
    return loopback.post(f"{app.server.url}/email/decide", data=form, headers=headers, timeout=30)


def tables(runner: Runner) -> dict[str, str]:
    """A digest of every table's rows, checkpoints included (the rate counters excepted)."""
    db = runner.store.db
    if db.backend == "sqlite":
        names = [r["name"] for r in db.all("SELECT name FROM sqlite_master WHERE type='table'")]
    else:
        names = [
            r["table_name"]
            for r in db.all(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()"
            )
        ]
    out = {}
    for name in sorted(set(names) - COUNTERS):
        rows = db.all(f'SELECT * FROM "{name}"')
        text = json.dumps(sorted(json.dumps(r, sort_keys=True, default=repr) for r in rows))
        out[name] = hashlib.sha256(text.encode()).hexdigest()
    return out


def refused(reply: httpx.Response, status: int, code: str) -> None:
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["code"] == code, reply.text
    assert set(reply.json()) == {"error"}
    assert set(reply.json()["error"]) - {"details"} == {"code", "message"}  # ids behind details


def finished(runner: Runner, thread_id: str) -> int:
    rows = runner.store.db.all(
        "SELECT id FROM run_events WHERE thread_id = :t AND reason = 'finished'", {"t": thread_id}
    )
    return len(rows)


def refunds(runner: Runner, order: str) -> int:
    return sum(1 for r in Ledger(runner.store.db).refunds() if r["order_id"] == order)


def test_reviewers_with_an_address_get_the_summary_and_opening_a_link_changes_nothing(app, runner):
    sent = mailed(app, runner, "t-mail-get")
    message = app.box.wait_for(ADDRESS["bob"], "t-mail-get")
    text = text_of(message)
    assert "EUR 49.90" in text and "Dana Whitfield" in text and "A-1001" in text, text
    assert message["Subject"].startswith("Approval requested: ") and "EUR" in message["Subject"]
    assert message["From"] == "Approvals <approvals@example.test>"
    assert set(sent["bob"]) == {"approve", "reject"}
    # the requester (separation of duties), an operator and a reviewer without address: none
    assert not app.box.to(ADDRESS["rita"], "t-mail-get")
    assert not app.box.to(ADDRESS["opal"], "t-mail-get")
    assert SECRET not in text and token_of(sent["bob"]["approve"]) != token_of(
        sent["carol"]["approve"]
    )

    before = tables(runner)
    page = open_link(sent["bob"]["approve"], **HTML)
    assert page.status_code == 200, page.text
    assert "EUR 49.90" in page.text and "Dana Whitfield" in page.text and "bob" in page.text
    assert 'method="post"' in page.text and "Opening it decided nothing" in page.text
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    for url in (sent["bob"]["approve"], sent["bob"]["reject"], sent["carol"]["approve"]):
        assert open_link(url).status_code == 200  # a mail scanner following every link
    assert tables(runner) == before
    assert runner.runs.get("t-mail-get").status == "waiting"


def test_the_post_approves_once_and_every_later_use_is_refused_and_changes_nothing(app, runner):
    sent = mailed(app, runner, "t-mail-ok")
    bob = token_of(sent["bob"]["approve"])
    first = use(app, bob)
    assert first.status_code == 200 and first.json()["status"] == "accepted", first.text
    wait_for_status(app.server.url, "t-mail-ok", "done")
    assert refunds(runner, "A-1001") == 1 and finished(runner, "t-mail-ok") == 1
    claim = runner.runs.last_claim("t-mail-ok")
    assert claim.detail["approvers"] == ["bob"] and claim.detail["source"] == "email"

    before = tables(runner)
    refused(use(app, bob), 409, "used")  # the same link again
    refused(use(app, token_of(sent["bob"]["reject"])), 409, "used")  # the mail's other link
    refused(open_link(sent["bob"]["approve"]), 409, "used")
    refused(use(app, token_of(sent["carol"]["approve"])), 409, "decided")  # too late
    refused(open_link(sent["carol"]["approve"]), 409, "not_waiting")
    page = use(app, bob, **HTML)  # a browser gets the same refusal as a page
    assert page.status_code == 409 and 'data-code="used"' in page.text
    assert tables(runner) == before
    assert refunds(runner, "A-1001") == 1 and finished(runner, "t-mail-ok") == 1


def test_two_uses_at_once_decide_once(app, runner):
    sent = mailed(app, runner, "t-mail-race")
    token = token_of(sent["bob"]["approve"])
    replies: list[httpx.Response] = []
    threads = [threading.Thread(target=lambda: replies.append(use(app, token))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.status_code for r in replies) == [200, 409, 409, 409], [r.text for r in replies]
    assert (
        sorted(r.json()["error"]["code"] for r in replies if r.status_code == 409) == ["used"] * 3
    )
    wait_for_status(app.server.url, "t-mail-race", "done")
    assert refunds(runner, "A-1001") == 1 and finished(runner, "t-mail-race") == 1


def altered(token: str, **changes) -> str:
    """The token with its payload changed and its signature kept (what a forger can do)."""
    version, body, mac = token.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload.update(changes)
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return f"{version}.{base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}.{mac}"


def test_a_link_works_for_its_reviewer_and_the_request_as_mailed_only(app, runner):
    sent = mailed(app, runner, "t-mail-who")
    bob = token_of(sent["bob"]["approve"])
    carol_key = json.loads(
        base64.urlsafe_b64decode(token_of(sent["carol"]["approve"]).split(".")[1] + "==")
    )["k"]
    before = tables(runner)
    for forged in (
        altered(bob, r="carol", k=carol_key),  # bob's link made out to carol
        altered(bob, r="dave"),
        altered(bob, a="approve", t="t-mail-ok"),  # another run
        altered(bob, e=int(time.time()) + 10**6),  # a later deadline
        bob[:-2],
        "",
    ):
        refused(use(app, forged), 403, "bad_link")
        refused(open_link(f"{app.server.url}/email/decide?token={forged}"), 403, "bad_link")
    assert tables(runner) == before
    # the request changed after the mail went out: the link names what it showed
    runner.store.db.execute(
        "UPDATE runs SET request_digest = :d WHERE thread_id = :t",
        {"d": "0" * 32, "t": "t-mail-who"},
    )
    before = tables(runner)
    refused(open_link(sent["bob"]["approve"]), 409, "stale")
    refused(use(app, bob), 409, "stale")
    refused(use(app, token_of(sent["carol"]["reject"])), 409, "stale")
    assert tables(runner) == before
    assert runner.runs.get("t-mail-who").status == "waiting"


def test_a_revoked_key_s_links_are_refused(app, runner):
    sent = mailed(app, runner, "t-mail-revoked")
    admin = api_key(app.db_env, "ada", "admin")
    carol_id = next(
        k["id"]
        for k in loopback.get(f"{app.server.url}/keys", headers=admin, timeout=30).json()
        if k["name"] == "carol" and not k["revoked_at"]
    )
    gone = loopback.post(f"{app.server.url}/keys/{carol_id}/revoke", headers=admin, timeout=30)
    assert gone.status_code == 200
    before = tables(runner)
    refused(use(app, token_of(sent["carol"]["approve"])), 401, "unauthorized")
    assert tables(runner) == before
    app.keys["carol"] = api_key(app.db_env, "carol", "reviewer", email=ADDRESS["carol"])


def test_an_expired_link_is_refused(app, runner):
    sent = mailed(app, runner, "t-mail-late", expires_in="3s")
    run = runner.runs.get("t-mail-late")
    # a token that says it expired, for a request still waiting: the token's own deadline
    key = json.loads(
        base64.urlsafe_b64decode(token_of(sent["bob"]["approve"]).split(".")[1] + "==")
    )["k"]
    old = mail.mint(
        mail.Link(
            key,
            "bob",
            run.thread_id,
            run.interrupt_id,
            run.request_digest,
            "approve",
            int(time.time()) - 1,
        )
    )
    before = tables(runner)
    refused(use(app, old), 410, "expired")
    past(run.expires_at + 0.1, "the request's deadline, judged by the app's clock")
    refused(open_link(sent["bob"]["approve"]), 410, "expired")
    refused(use(app, token_of(sent["bob"]["approve"])), 410, "expired")
    assert tables(runner) == before


def test_two_reviewers_links_complete_a_quorum(app, runner):
    sent = mailed(app, runner, "t-mail-two", order="A-1004")
    one = use(app, token_of(sent["bob"]["approve"]))
    assert one.status_code == 200 and one.json()["status"] == "approval recorded", one.text
    assert runner.runs.get("t-mail-two").status == "waiting"
    page = open_link(sent["carol"]["approve"], **HTML)
    assert "1 of 2" in page.text and "bob" in page.text
    two = use(app, token_of(sent["carol"]["approve"]))
    assert two.status_code == 200 and two.json()["status"] == "accepted", two.text
    wait_for_status(app.server.url, "t-mail-two", "done")
    assert refunds(runner, "A-1004") == 1
    assert runner.runs.last_claim("t-mail-two").detail["approvers"] == ["bob", "carol"]


def test_only_the_link_routes_go_without_a_bearer_credential(app, runner):
    refused(
        loopback.post(f"{app.server.url}/email/other", data={"token": "x"}, timeout=30),
        401,
        "unauthorized",
    )
    refused(
        loopback.post(f"{app.server.url}/email/decide/x", data={"token": "x"}, timeout=30),
        401,
        "unauthorized",
    )
    refused(
        loopback.post(f"{app.server.url}/email/decide", data={"token": "x"}, timeout=30),
        403,
        "bad_link",
    )


def test_a_reviewer_rejects_with_a_reason_in_a_phone_sized_browser(app, runner, browser):
    sent = mailed(app, runner, "t-mail-phone", order="A-1002")
    page = browser.new_page(viewport={"width": 375, "height": 800})
    page.goto(sent["carol"]["reject"])
    assert "Reject" in page.inner_text("#title") and "EUR 329.00" in page.inner_text("main")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    assert runner.runs.get("t-mail-phone").status == "waiting"
    page.fill("#reason", "customer kept the machine")
    page.click("#decide")
    assert "Rejected as carol" in page.inner_text("#outcome")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    view = wait_for_status(app.server.url, "t-mail-phone", "done")
    assert refunds(runner, "A-1002") == 0, view
    claim = runner.runs.last_claim("t-mail-phone")
    assert claim.detail["source"] == "email"
    assert claim.detail["decision"]["decisions"][0]["message"] == "customer kept the machine"
    page.close()


def test_under_an_authority_matrix_only_keys_of_the_amount_s_band_get_mail(app, runner):
    """Who is mailed, as ``ops.mail`` chooses when the run carries authority bands."""
    api_key(app.db_env, "sam", "reviewer", groups=("support-leads",), email="sam@example.test")
    api_key(app.db_env, "fay", "reviewer", groups=("finance",), email="fay@example.test")
    bands = [{"up_to": "100.00", "groups": ["support-leads"]}, {"groups": ["finance"]}]
    small = mailed(app, runner, "t-mail-small")  # A-1001, EUR 49.90
    assert small["bob"]
    run = dataclasses.replace(runner.runs.get("t-mail-small"), authority=bands)
    names = [k.name for k in mail.recipients(runner.store.db, run, runner.graphs.amount)]
    assert names == ["sam"]
    mailed(app, runner, "t-mail-large", order="A-1002")  # EUR 329.00
    run = dataclasses.replace(runner.runs.get("t-mail-large"), authority=bands)
    assert [k.name for k in mail.recipients(runner.store.db, run, runner.graphs.amount)] == ["fay"]
    # no matrix: every reviewer key with an address but the requester (separation of duties)
    everyone = mail.recipients(runner.store.db, runner.runs.get("t-mail-large"))
    assert {k.name for k in everyone} >= {"bob", "carol", "sam", "fay"}
    assert not {k.name for k in everyone} & {"rita", "dave", "opal"}


def test_mail_is_off_until_configured(app, runner, monkeypatch):
    mailed(app, runner, "t-mail-off")
    run = runner.runs.get("t-mail-off")
    paused = "paused for approval"
    everyone = mail.recipients(runner.store.db, run)
    with runner.store.db.transaction() as tx:  # owed again: the same rows, owed once
        shown = Shown(tx, run, None)
        assert mail.Mail().owe(tx, run, paused, shown) == len(everyone) >= 2
    runner.sweeper.flush_outbox()
    assert len(app.box.to(ADDRESS["bob"], "t-mail-off")) == 1  # not mailed twice
    for name in ("SMTP_HOST", "EMAIL_FROM", "EMAIL_LINK_SECRET", "PUBLIC_URL"):
        with monkeypatch.context() as m, runner.store.db.transaction() as tx:
            m.delenv(name)
            assert mail.Mail().owe(tx, run, paused, Shown(tx, run, None)) == 0
