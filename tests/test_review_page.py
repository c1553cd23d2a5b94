"""What you see is what you approve (issue 21), in Debian chromium on both backends: the decision
is the button pressed, never a pre-selected one; a change can only be approved as a change; a
quorum's second approver sees the first one's changes and approves them in one click; the
business check refuses a bad edit at the form; pages read as words at phone width too.

The server is the web inbox tests' (``testkit.web``: one per backend for this module, the policy
of 2 approvers for refunds over 500.00); the browser is the session's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from testkit.web import Site, edit, loads, previewed, sign_in, submit, wait_done, web_site


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    yield from web_site(request, tmp_path_factory)


REFUNDS = "SELECT amount_cents FROM refunds WHERE thread_id = :t"


def refunds(site, thread_id: str) -> list[int]:
    return [r["amount_cents"] for r in site.sql(REFUNDS, {"t": thread_id})]


def test_a_changed_value_is_only_approved_as_a_change(browser, site):
    before = site.start("rita", "Refund order A-1002: the machine leaks", "r-change")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['r-change']}")
    assert page.locator("input[type=radio]:checked").count() == 0  # nothing pre-selected
    edit(page, {"amount": "100"})
    submit(page)  # "Approve", with a changed amount on the form
    assert "Approve with changes" in page.inner_text("#err-0-amount")
    assert site.run(site.ids["r-change"])["approval"] == before["approval"]
    assert refunds(site, site.ids["r-change"]) == []
    assert "EUR 329.00 → EUR 100.00" in previewed(page)
    submit(page, "#approve-edit-0")
    wait_done(page)
    assert refunds(site, site.ids["r-change"]) == [10000]
    assert "approved with changes: Amount EUR 329.00 → EUR 100.00" in page.inner_text("#history")
    page.context.close()


def test_approve_with_changes_is_disabled_until_something_changes(browser, site):
    site.start("rita", "Refund order A-1002: the machine leaks", "r-nochange")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['r-nochange']}")
    page.click("#edit-summary-0")
    assert page.locator("#approve-edit-0").is_disabled()
    page.fill("#a0-amount", "329.00")  # the same amount, written differently
    assert page.locator("#approve-edit-0").is_disabled()
    page.context.close()


def test_a_reason_without_reject_never_approves(browser, site):
    site.start("rita", "Refund order A-1005: one ear cup is dead", "r-reason")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['r-reason']}")
    page.click("#reject-0 summary")
    page.fill("#reason0", "fraud suspected")
    submit(page)  # Approve
    assert "press Reject" in page.inner_text("#err-0-reason")
    assert site.run(site.ids["r-reason"])["status"] == "waiting"
    submit(page, "#reject-button-0")
    wait_done(page)
    assert refunds(site, site.ids["r-reason"]) == []
    page.context.close()


def test_a_reject_without_a_reason_is_refused_beside_the_field(browser, site):
    site.start("rita", "Refund order A-1005: one ear cup is dead", "r-noreason")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['r-noreason']}")
    page.click("#reject-0 summary")
    reply = page.expect_response(lambda r: r.url.endswith("/decide"))
    with reply as info:
        page.click("#reject-button-0")
    assert info.value.status == 422
    assert "write why you reject it" in page.inner_text("#err-0-reason")
    assert site.run(site.ids["r-noreason"])["status"] == "waiting"
    page.context.close()


def test_an_edit_beyond_what_is_refundable_is_refused_at_the_form(browser, site):
    before = site.start("rita", "Refund order A-1005: one ear cup is dead", "r-over")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['r-over']}")
    edit(page, {"amount": "500.00"})
    with page.expect_response(lambda r: r.url.endswith("/decide")) as info:
        page.click("#approve-edit-0")
    assert info.value.status == 422
    assert "still refundable" in page.inner_text("#err-0-amount")
    assert "EUR 199.99" in page.inner_text("#err-0-amount")
    after = site.run(site.ids["r-over"])
    assert after["status"] == "waiting" and after["approval"] == before["approval"]
    assert refunds(site, site.ids["r-over"]) == []
    page.context.close()


def test_the_second_approver_approves_the_first_ones_changes_in_one_click(browser, site):
    site.start("rita", "Refund order A-1004: the desk arrived wobbly", "r-quorum")
    alice = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['r-quorum']}")
    edit(alice, {"amount": "520"})
    submit(alice, "#approve-edit-0")
    assert "1 of 2" in alice.inner_text("#outcome")
    carol = sign_in(browser, site, "carol", f"/inbox/requests/{site.ids['r-quorum']}")
    diff = carol.inner_text("#diff")
    assert "EUR 540.00" in diff and "EUR 520.00" in diff
    assert "counter-proposal" in carol.inner_text("#proposal")
    submit(carol, "#approve-proposal")
    assert "applied" in carol.inner_text("#outcome")
    wait_done(carol)
    assert refunds(site, site.ids["r-quorum"]) == [52000]
    alice.context.close()
    carol.context.close()


def test_a_counter_proposal_restarts_the_count(browser, site):
    site.start("rita", "Refund order A-1004: the desk arrived wobbly", "r-counter")
    bob = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['r-counter']}")
    edit(bob, {"amount": "520"})
    submit(bob, "#approve-edit-0")
    carol = sign_in(browser, site, "carol", f"/inbox/requests/{site.ids['r-counter']}")
    assert "count starts again" in (carol.text_content("#counter-note") or "")
    edit(carol, {"amount": "510"})
    submit(carol, "#approve-edit-0")
    assert "1 of 2" in carol.inner_text("#outcome")
    assert "carol" in carol.inner_text("#quorum") and "bob" not in carol.inner_text("#quorum")
    bob.goto(f"{site.url}/inbox/requests/{site.ids['r-counter']}")
    assert "EUR 510.00" in bob.inner_text("#diff")
    submit(bob, "#approve-proposal")
    wait_done(bob)
    assert refunds(site, site.ids["r-counter"]) == [51000]
    bob.context.close()
    carol.context.close()


def test_keyboard_only_approve_with_changes(browser, site):
    site.start("rita", "Refund order A-1002: the machine leaks", "r-keys")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['r-keys']}")

    def tab_to(target: str) -> None:
        for _ in range(80):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement && document.activeElement.id") == target:
                return
        raise AssertionError(f"Tab never reached #{target}")

    tab_to("edit-summary-0")
    page.keyboard.press("Enter")  # opens "Change values…"
    tab_to("a0-amount")
    page.keyboard.press("Control+A")
    page.keyboard.type("300")
    tab_to("approve-edit-0")
    loads(page, lambda: page.keyboard.press("Enter"))
    wait_done(page)
    assert refunds(site, site.ids["r-keys"]) == [30000]
    page.context.close()


def test_phone_width_has_no_horizontal_scroll(browser, site):
    site.start("rita", "Refund order A-1004: the desk arrived wobbly", "r-phone")
    site.start(
        "rita",
        "Order 4 toner cartridges for CC-100: printers are empty",
        "r-phone-po",
        "purchase-order",
    )
    page = sign_in(browser, site, "bob")
    page.set_viewport_size({"width": 375, "height": 800})
    for path in (
        "/inbox",
        f"/inbox/requests/{site.ids['r-phone']}",
        f"/inbox/requests/{site.ids['r-phone-po']}",
        "/inbox?view=decided",
    ):
        page.goto(f"{site.url}{path}")
        page.click("#edit-summary-0") if path.startswith("/inbox/requests") else None
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 375, (path, width)
    page.context.close()


def test_purchase_orders_show_total_supplier_and_budget_left(browser, site):
    site.start(
        "rita", "Order 4 toner cartridges for CC-100: printers are empty", "r-po", "purchase-order"
    )
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['r-po']}")
    view = page.inner_text("#view-0")
    assert "Total\nEUR 316.00" in view
    assert "Northwind Office Supply" in view
    assert re.search(r"Budget left\nEUR [\d,]+\.\d\d", view)
    page.goto(f"{site.url}/inbox?workflow=purchase-order")
    row = page.locator("#queue tbody tr", has_text="toner cartridge")
    assert "EUR 316.00" in row.first.inner_text()
    page.goto(f"{site.url}/inbox?workflow=refund")
    for amount in page.locator("#queue tbody td.num").all_inner_texts():
        assert amount.startswith("EUR "), amount
    page.context.close()


def test_search_and_the_decided_view(browser, site):
    site.start("rita", "Refund order A-1001: the kettle leaks", "r-search")
    page = sign_in(browser, site, "bob", "/inbox?q=r-sear")
    assert "for order A-1001" in page.inner_text("#queue")
    page.goto(f"{site.url}/inbox?q=whitfield")
    assert "for order A-1001" in page.inner_text("#queue")
    assert re.search(r"Queue \(\d+\)", page.title())
    page.goto(f"{site.url}/inbox/requests/{site.ids['r-search']}")
    submit(page)
    assert page.locator("#next-request").count() == 1
    wait_done(page)
    page.goto(f"{site.url}/inbox?view=decided&q=r-search")
    assert "for order A-1001" in page.inner_text("#queue")
    page.context.close()


PROCESS_ID = re.compile(r"\w+@[\w.-]+:\d+")


def test_no_page_shows_json_or_a_process_id(browser, site):
    site.start("rita", "Refund order A-1002: the machine leaks", "r-words")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids['r-words']}")
    edit(page, {"amount": "99"})
    submit(page, "#approve-edit-0")
    wait_done(page)
    for path in ("/inbox", f"/inbox/requests/{site.ids['r-words']}", "/inbox?view=decided"):
        page.goto(f"{site.url}{path}")
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        text = page.inner_text("main")
        found = re.search(r"[{}\[\]]|\":", text)
        assert not found, (path, text[max(0, found.start() - 200) : found.end() + 100])
        assert not PROCESS_ID.search(text), (path, text)
    page.goto(f"{site.url}/inbox/requests/{site.ids['r-words']}")
    assert "rf_" not in page.inner_text("#effects")  # the refund's number is behind "details"
    page.click("#effects details summary")
    assert "rf_" in page.inner_text("#effects")
    page.context.close()
