"""The amount typed is the amount paid (issue 34), in Debian chromium at desktop and phone
width: an amount is read the way the reviewer's browser language writes numbers, "1,50" that
could be two amounts is refused with both, and more decimals than the currency has are refused,
never rounded; the preview says the parsed amount in the currency before anything is applied.

The server is the web inbox tests' (``testkit.web``); the browser is the module's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.web import Site, edit, previewed, sign_in, snapshot, submit, wait_done, web_site

WIDTHS = [1280, 375]
REFUNDS = "SELECT amount_cents FROM refunds WHERE thread_id = :t"


@pytest.fixture(scope="module", params=["sqlite"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    yield from web_site(request, tmp_path_factory)


def _refunds(site: Site, name: str) -> list[int]:
    return [r["amount_cents"] for r in site.sql(REFUNDS, {"t": site.ids[name]})]


def _fits(page) -> None:
    """Nothing wider than the window: the reviewer never scrolls sideways to read an error."""
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{overflow}px wider than the window"


def _refused(site: Site, page, name: str, before: dict) -> str:
    with (
        page.expect_navigation(),
        page.expect_response(lambda r: r.url.endswith("/decide")) as info,
    ):
        page.click("#approve-edit-0")
    assert info.value.status == 422
    after = site.run(site.ids[name])
    assert after["status"] == "waiting" and after["approval"] == before["approval"]
    assert _refunds(site, name) == []
    return page.inner_text("#err-0-amount")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_decimal_comma_in_german_pays_one_fifty(browser, site, width, tmp_path):
    name = f"m-de-{width}"
    site.start("rita", "Refund order A-1002: the machine leaks", name)
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids[name]}", "de-DE", width)
    assert page.input_value("#a0-amount") == "329,00"  # the proposal, written the German way
    edit(page, {"amount": "1,50"})
    assert "Betrag" not in previewed(page)  # labels stay the workflow's; numbers go German
    assert "EUR 329,00 → EUR 1,50" in previewed(page)
    _fits(page)
    snapshot(page, tmp_path, f"de-{width}", "inbox-amount-german.png" if width == 1280 else None)
    submit(page, "#approve-edit-0")
    wait_done(page)
    assert _refunds(site, name) == [150]
    page.context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_decimal_comma_in_english_is_refused_with_both_readings(browser, site, width, tmp_path):
    name = f"m-en-{width}"
    before = site.start("rita", "Refund order A-1002: the machine leaks", name)
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids[name]}", "en-GB", width)
    edit(page, {"amount": "1,50"})
    said = previewed(page)
    assert "EUR 1.50" in said and "EUR 150.00" in said, said
    error = _refused(site, page, name, before)
    assert "EUR 1.50" in error and "EUR 150.00" in error, error
    assert "EUR 1.50" in previewed(page)  # the page after the refusal says it again
    _fits(page)
    snapshot(
        page, tmp_path, f"en-{width}", "inbox-amount-two-readings.png" if width == 1280 else None
    )
    page.context.close()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("typed", ["12.345", "0.001"])
def test_more_decimals_than_the_euro_has_are_refused_not_rounded(browser, site, width, typed):
    name = f"m-{typed}-{width}"
    before = site.start("rita", "Refund order A-1001: broken", name)
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids[name]}", "en-US", width)
    edit(page, {"amount": typed})
    assert "3 decimals but EUR has 2" in previewed(page)
    error = _refused(site, page, name, before)
    assert "3 decimals but EUR has 2" in error and "not rounded" in error, error
    _fits(page)
    page.context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_duplicate_requests_plain_approve_is_refused_before_applied(
    browser, site, width, tmp_path
):
    first, second = f"m-dup1-{width}", f"m-dup2-{width}"
    site.start("rita", "Refund order A-1005: no sound", first)
    before = site.start("mia", "Refund order A-1005: no sound at all", second)
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids[second]}", "en-US", width)
    warned = page.inner_text("#warning-0")
    assert "another request to refund A-1005 waits for a reviewer" in warned, warned
    assert "run " not in warned  # no run ids in what a reviewer reads

    other = sign_in(browser, site, "carol", f"/inbox/requests/{site.ids[first]}", "en-US", width)
    submit(other)
    wait_done(other)
    assert _refunds(site, first) == [19999]

    page.reload()
    assert "Approving it is refused" in page.inner_text("#warning-0")
    with (
        page.expect_navigation(),
        page.expect_response(lambda r: r.url.endswith("/decide")) as info,
    ):
        page.click("#approve-0")
    assert info.value.status == 422
    assert "applied" not in page.inner_text("#outcome")
    error = page.inner_text("#error-0")
    assert "Refused" in error and "still refundable" in error and "EUR 0.00" in error, error
    assert "amount:" not in page.inner_text("#outcome")
    after = site.run(site.ids[second])
    assert after["status"] == "waiting" and after["approval"] == before["approval"]
    assert _refunds(site, second) == []
    _fits(page)
    snapshot(
        page,
        tmp_path,
        f"duplicate-{width}",
        "inbox-duplicate-refused.png" if width == 1280 else None,
    )
    other.context.close()
    page.context.close()
