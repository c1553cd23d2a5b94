"""The web inbox in a real browser: headless Debian chromium (Playwright) against uvicorn on
127.0.0.1, on both backends. One server per backend for the module, one browser for the session;
each person gets a browser context of their own (their own cookies), as two reviewers on two
machines would.

The policy is the one the access tests use: separation of duties, and a 2-approver quorum for
refunds over 500.00 (order A-1004 asks 540.00).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from testkit.databases import api_key
from testkit.web import Site, edit, loads, previewed, sign_in, submit, wait_done, web_site

playwright_sync = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    yield from web_site(request, tmp_path_factory)


def test_sign_in_and_the_queue_lists_a_paused_run(browser, site):
    site.start("rita", "Refund order A-1001: broken", "w-queue")
    page = sign_in(browser, site, "bob")
    row = page.locator("#queue tr", has_text="for order A-1001")
    assert row.count() >= 1
    assert "rita" in row.first.inner_text()
    assert "EUR 49.90" in row.first.inner_text()
    cookie = next(c for c in page.context.cookies() if c["name"] == "aw_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    page.context.close()


def test_approve_and_see_it_done(browser, site):
    site.start("rita", "Refund order A-1001: broken", "w-approve")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['w-approve']}")
    assert "Refund EUR 49.90 to Dana Whitfield" in page.inner_text("#title")
    submit(page)
    assert "applied" in page.inner_text("#outcome")
    wait_done(page)
    assert "Refunded 49.90" in page.inner_text("#result")
    page.context.close()


def test_a_bad_edit_shows_the_field_error_and_changes_nothing(browser, site):
    before = site.start("rita", "Refund order A-1001: broken", "w-bad")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['w-bad']}")
    edit(page, {"amount": "twelve"})
    submit(page, "#approve-edit-0")
    assert "not a number" in page.inner_text("#err-0-amount")
    edit(page, {"amount": "-5"})
    submit(page, "#approve-edit-0")
    assert page.locator("#err-0-amount").is_visible()
    assert page.locator("#a0-order_id").get_attribute("readonly") is not None
    after = site.run(site.ids["w-bad"])
    assert after["status"] == "waiting" and after["approval"] == before["approval"]
    page.context.close()


def test_a_valid_edit_runs_exactly_the_edited_arguments(browser, site):
    site.start("rita", "Refund order A-1001: broken", "w-edit")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['w-edit']}")
    edit(page, {"amount": "12.50", "reason": "partial refund agreed"})
    assert "Amount EUR 49.90 → EUR 12.50" in previewed(page)
    submit(page, "#approve-edit-0")
    wait_done(page)
    rows = site.sql(
        "SELECT amount_cents, reason FROM refunds WHERE thread_id = :t", {"t": site.ids["w-edit"]}
    )
    assert rows == [{"amount_cents": 1250, "reason": "partial refund agreed"}]
    page.context.close()


def test_reject(browser, site):
    site.start("rita", "Refund order A-1001: broken", "w-reject")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['w-reject']}")
    page.click("#reject-0 summary")
    page.fill("#reason0", "no proof of damage")
    submit(page, "#reject-button-0")
    wait_done(page)
    assert site.sql("SELECT * FROM refunds WHERE thread_id = :t", {"t": site.ids["w-reject"]}) == []
    page.context.close()


def test_a_two_of_three_quorum_with_two_sessions(browser, site):
    site.start("rita", "Refund order A-1004: wobbly", "w-quorum")
    first = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['w-quorum']}")
    second = sign_in(browser, site, "carol", f"/inbox/requests/{site.ids['w-quorum']}")
    assert "0 of 2" in first.inner_text("#quorum")
    submit(first)
    assert "1 of 2" in first.inner_text("#outcome")
    assert site.run(site.ids["w-quorum"])["status"] == "waiting"
    submit(second)  # carol's page was loaded before bob's approval: the request did not change
    assert "applied" in second.inner_text("#outcome")
    wait_done(second)
    assert site.sql(
        "SELECT amount_cents FROM refunds WHERE thread_id = :t", {"t": site.ids["w-quorum"]}
    ) == [{"amount_cents": 54000}]
    first.context.close()
    second.context.close()


def test_the_requester_is_refused_by_separation_of_duties(browser, site):
    site.start("mia", "Refund order A-1002: leaks", "w-duties")
    page = sign_in(browser, site, "mia", f"/inbox/requests/{site.ids['w-duties']}")
    submit(page)
    assert "separation of duties" in page.inner_text("#outcome")
    assert site.run(site.ids["w-duties"])["status"] == "waiting"
    page.context.close()


def test_a_stale_page_is_refused_and_says_what_changed(browser, site):
    view = site.start("rita", "Refund order A-1001: broken", "w-stale")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['w-stale']}")
    request = {k: v for k, v in view["approval"].items() if k not in ("interrupt_id", "digest")}
    request["action_requests"][0]["args"]["amount"] = 45.0
    site.sql(
        "UPDATE runs SET request = :r, request_digest = :d WHERE thread_id = :t",
        {"r": json.dumps(request), "d": "changed-digest", "t": site.ids["w-stale"]},
    )
    submit(page)
    assert "changed" in page.inner_text("#outcome")
    assert "amount was 49.90, is now 45.00" in page.inner_text("#changes")
    assert site.run(site.ids["w-stale"])["status"] == "waiting"
    page.context.close()


def test_an_expired_request_is_refused(browser, site):
    site.start("rita", "Refund order A-1001: broken", "w-late")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['w-late']}")
    site.sql(
        "UPDATE runs SET expires_at = :at WHERE thread_id = :t",
        {"at": time.time() - 1, "t": site.ids["w-late"]},
    )
    submit(page)
    assert "expired" in page.inner_text("#outcome")
    assert site.run(site.ids["w-late"])["status"] in ("waiting", "expired")
    page.context.close()


def test_a_form_without_the_csrf_token_is_refused(browser, site):
    view = site.start("rita", "Refund order A-1001: broken", "w-csrf")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['w-csrf']}")
    approval = view["approval"]
    reply = page.request.post(
        f"{site.url}/inbox/requests/{site.ids['w-csrf']}/decide",
        form={
            "interrupt_id": approval["interrupt_id"],
            "digest": approval["digest"],
            "d0": "approve",
        },
    )
    assert reply.status == 403
    assert "CSRF" in reply.text()
    assert site.run(site.ids["w-csrf"])["status"] == "waiting"
    page.context.close()


def test_keyboard_only_approval(browser, site):
    site.start("rita", "Refund order A-1001: broken", "w-keys")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['w-keys']}")
    for _ in range(80):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.id") == "approve-0":
            break
    else:
        raise AssertionError("Tab never reached the submit button")
    loads(page, lambda: page.keyboard.press("Enter"))
    wait_done(page)
    page.context.close()


def test_interrupt_links_redirect_and_requesters_read_only(browser, site):
    view = site.start("rita", "Refund order A-1002: leaks", "w-link")
    page = sign_in(browser, site, "rita", f"/inbox/requests/{view['approval']['interrupt_id']}")
    assert page.url.endswith(f"/inbox/requests/{site.ids['w-link']}")
    assert page.locator("#decision").count() == 0
    page.goto(f"{site.url}/inbox")
    queue = page.inner_text("#queue tbody")
    assert "w-link" in page.content() and "mia" not in queue  # her own runs only
    page.context.close()


def test_sign_out_ends_the_session(browser, site):
    page = sign_in(browser, site, "bob")
    page.click("text=Sign out")
    page.wait_for_url(f"{site.url}/inbox/login")
    page.goto(f"{site.url}/inbox")
    assert "/inbox/login" in page.url
    page.context.close()


def test_a_revoked_key_ends_its_sessions(browser, site):
    site.keys["temp"] = api_key(site.db_env, "temp", "reviewer")
    page = sign_in(browser, site, "temp")
    key_id = site.keys["temp"]["authorization"].split("_")[1]
    site.sql(
        "UPDATE api_keys SET revoked_at = :now WHERE id = :id", {"now": time.time(), "id": key_id}
    )
    page.goto(f"{site.url}/inbox")
    assert "/inbox/login" in page.url
    page.context.close()


def test_operators_see_failed_runs_and_retry_them(browser, site):
    site.start("rita", "Refund order A-1005: noisy", "w-failed")
    site.sql(
        "UPDATE runs SET status = 'failed', error = 'boom' WHERE thread_id = :t",
        {"t": site.ids["w-failed"]},
    )
    page = sign_in(browser, site, "olga", "/inbox/runs?status=failed")
    row = page.locator("#runs tr", has_text="w-failed")
    assert "boom" in row.inner_text()
    loads(page, row.locator("button", has_text="Cancel").click)
    assert "w-failed" in page.inner_text("#note")
    assert site.run(site.ids["w-failed"])["status"] == "cancelled"
    page.context.close()
