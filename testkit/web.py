"""The web inbox as a reviewer meets it: the app under uvicorn on 127.0.0.1 with the access
tests' policy (separation of duties, two approvers for refunds over 500.00), people with keys,
and the Playwright steps a reviewer takes (sign in, change values, press a decision)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from api.pages.session import COOKIE
from testkit import loopback
from testkit.databases import api_key, fresh_database, pointed_at
from testkit.servers import Server, start_server
from testkit.webapp import worker_env

POLICY = {"SEPARATION_OF_DUTIES": "1", "REFUND_QUORUM_AMOUNT": "500", "REFUND_QUORUM": "2"}
PEOPLE = {
    "rita": ("requester",),
    "mia": ("requester", "reviewer"),
    "bob": ("reviewer",),
    "carol": ("reviewer",),
    "olga": ("operator",),
}


@dataclass
class Site:
    server: Server
    db_env: dict[str, str]
    keys: dict[str, dict] = field(default_factory=dict)  # Authorization headers by person
    ids: dict[str, str] = field(default_factory=dict)  # run ids by the thread id chosen

    @property
    def url(self) -> str:
        return self.server.url

    def start(self, who: str, text: str, thread_id: str, workflow: str = "refund") -> dict:
        """Start a run; the demo order it names starts with nothing refunded (the five demo
        orders are shared by every test, and an edit is checked against what is refundable)."""
        order = re.search(r"A-\d{4}", text)
        if order:
            self.sql("DELETE FROM refunds WHERE order_id = :o", {"o": order.group()})
            self.sql("DELETE FROM order_balances WHERE order_id = :o", {"o": order.group()})
        reply = loopback.post(
            f"{self.url}/runs",
            headers=self.keys[who],
            json={"input": text, "thread_id": thread_id, "workflow": workflow},
            timeout=60,
        )
        assert reply.status_code == 201, reply.text
        view = reply.json()
        assert view["status"] == "waiting", view
        self.ids[thread_id] = view["thread_id"]  # the chosen name, in the requester's scope
        return view

    def run(self, thread_id: str) -> dict:
        return loopback.get(f"{self.url}/runs/{thread_id}", headers=self.keys["olga"]).json()

    def sql(self, statement: str, params: dict | None = None) -> list[dict]:
        from store.db import open_store

        with pointed_at(self.db_env), open_store() as store:
            if statement.lstrip().upper().startswith("SELECT"):
                return store.db.all(statement, params)
            store.db.execute(statement, params)
            return []


CHROMIUM = "/usr/bin/chromium"
# the session cookie a sign-in set, by the server's address and the credential signed in with
_SESSIONS: dict[tuple[str, str], dict] = {}


def web_site(
    request: pytest.FixtureRequest, tmp_path_factory, port: int | None = None, **policy: str
) -> Iterator[Site]:
    """A module's server on the backend of ``request.param`` (its ``site`` fixture), with
    ``policy`` settings beside the access tests' own (on ``port`` when ``PUBLIC_URL`` names
    it)."""
    tmp = tmp_path_factory.mktemp(f"web-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with fresh_database(request.param, tmp, pg) as db_env:
        server = start_server(
            worker_env(db_env, **{**POLICY, **policy}),
            tmp / "uvicorn.log",
            timeout=180,  # a deadline, not a timing: a loaded machine starts slowly
            port=port,
        )
        site = Site(server, db_env)
        for name, roles in PEOPLE.items():
            site.keys[name] = api_key(db_env, name, *roles)
        yield site
        server.stop()


def sign_in(
    browser,
    site: Site,
    who: str,
    next_path: str = "/inbox",
    locale: str = "en-US",
    width=1280,
    zone: str | None = None,
):
    """A new browser context (its own storage, language, time zone and window width) signed in
    as ``who``; its page.

    The first time a module signs ``who`` in, the context fills in the sign-in form; after that
    it starts with the session cookie that sign-in set (only that cookie), so a test's own
    steps are what its browser does. The server checks that session on every request as it
    checks any: a session ended since (a test signed out, a key revoked) lands on the sign-in
    page, and the form is filled in again. A test of the sign-in itself uses a fresh context.
    """
    viewport = {"width": width, "height": 900}
    credential = site.keys[who]["authorization"].split(" ", 1)[1]
    known = _SESSIONS.get((site.url, credential))
    state = {"cookies": [known], "origins": []} if known else None
    context = browser.new_context(
        locale=locale, viewport=viewport, timezone_id=zone, storage_state=state
    )
    page = context.new_page()
    page.goto(f"{site.url}{next_path}")
    if "/inbox/login" in page.url:
        page.fill("#credential", credential)
        page.click("#sign-in")
        page.wait_for_url(lambda url: "/inbox/login" not in url)
        [cookie] = [c for c in context.cookies() if c["name"] == COOKIE]
        _SESSIONS[(site.url, credential)] = cookie
    return page


def loads(page, act: Callable[[], object]) -> None:
    """Do ``act`` (a click, an Enter) and wait until the page it submits has loaded. Waiting
    for the load state alone can return on the page still showing, before the submit's
    navigation has begun (CI read the old page's rows that way)."""
    with page.expect_navigation():
        act()


def submit(page, button: str = "#approve-0") -> None:
    """Press one of the decision buttons (no decision is pre-selected)."""
    loads(page, lambda: page.click(button))


def edit(page, values: dict[str, str]) -> None:
    """Open "Change values…" and type the new values."""
    if page.locator("#edit-0").get_attribute("open") is None:
        page.click("#edit-summary-0")
    for name, value in values.items():
        field = page.locator(f"#a0-{name}")
        if field.evaluate("e => e.tagName") == "SELECT":  # picked from a list: by its value
            field.select_option(value)
        else:
            field.fill(value)


def previewed(page, index: int = 0) -> str:
    """The preview under the edit fields once the server has read the typed values."""
    from playwright.sync_api import expect

    shown = page.locator(f"#preview-{index}")
    expect(shown).to_have_attribute("data-state", re.compile("ready|error"))
    return shown.inner_text()


def wait_done(page, timeout: float = 30_000) -> None:
    """The result page refreshes itself until the run has finished."""
    from playwright.sync_api import expect

    expect(page.locator("#status")).to_have_text("done", timeout=timeout)


PHOTOGRAPHED = {  # the docs' pictures the browser tests take: (test file, picture), each once
    "inbox-amount-german.png": "tests/test_money_page.py",
    "inbox-amount-two-readings.png": "tests/test_money_page.py",
    "inbox-duplicate-refused.png": "tests/test_money_page.py",
    "inbox-decided.png": "tests/test_decided_view.py",
    "inbox-phone-decided.png": "tests/test_decided_view.py",
    "inbox-decided-request.png": "tests/test_decided_view.py",
    "inbox-po-supplier-switch.png": "tests/test_purchase_edits.py",
    "inbox-po-quorum-total.png": "tests/test_purchase_edits.py",
    "inbox-po-band-after-edit.png": "tests/test_band_after_edit.py",
    "inbox-refused-decided.png": "tests/test_reviewer_words.py",
}


def snapshot(page, tmp_path, name: str, docs: str | None = None) -> None:
    """The page as the test left it, kept with the test's files; and, when ``DOCS_SHOTS`` names
    a directory (``python -m bench.inbox --screenshots``), as the docs' picture ``docs`` too, so
    the pictures in the docs are the pages the tests judged."""
    import os
    from pathlib import Path

    page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
    target = os.environ.get("DOCS_SHOTS")
    if docs is not None and target:
        assert docs in PHOTOGRAPHED, docs
        page.screenshot(path=str(Path(target) / docs), full_page=True)
