"""Every view says what happened (issue 34), in Debian chromium at desktop and phone width: the
Decided list shows, per request, how it ended (approved, approved with changes, rejected,
failed with the reason, expired, cancelled) with its own badge, the amount actually paid (the
edited one, not the proposal), and filters in those words; the request page says the same.

The server is the web inbox tests' (``testkit.web``); the browser is the module's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit import loopback
from testkit.web import Site, edit, sign_in, snapshot, submit, wait_done, web_site

WIDTHS = [1280, 375]


@pytest.fixture(scope="module", params=["postgres"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    yield from web_site(request, tmp_path_factory)


def _decide(browser, site: Site, name: str, how: str, width: int) -> None:
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids[name]}", width=width)
    if how == "edit":
        edit(page, {"amount": "150"})
        submit(page, "#approve-edit-0")
    elif how == "reject":
        page.click("#reject-0 summary")
        page.fill("#reason0", "the customer withdrew the claim")
        submit(page, "#reject-button-0")
    else:
        submit(page)
    wait_done(page)
    page.context.close()


def _ended(site: Site, width: int) -> dict[str, str]:
    """One request per way a request can end; their names by outcome."""
    tag = f"d{width}"
    names = {word: f"{tag}-{word.replace(' ', '-')}" for word in (
        "approved", "approved with changes", "rejected", "failed", "expired", "cancelled"
    )}  # fmt: skip
    orders = {
        "approved": "A-1001",
        "approved with changes": "A-1002",
        "rejected": "A-1005",
        "failed": "A-1001",
        "expired": "A-1002",
        "cancelled": "A-1005",
    }
    for word, name in names.items():
        site.start("rita", f"Refund order {orders[word]}: {tag} case", name)
    return names


@pytest.mark.parametrize("width", WIDTHS)
def test_the_decided_view_says_how_each_request_ended(browser, site, width, tmp_path):
    names = _ended(site, width)
    _decide(browser, site, names["approved"], "approve", width)
    _decide(browser, site, names["approved with changes"], "edit", width)
    _decide(browser, site, names["rejected"], "reject", width)
    site.sql(  # a run that failed after its decision, as the sweep records it
        "UPDATE runs SET status = 'failed', error = 'the payment service timed out' "
        "WHERE thread_id = :t",
        {"t": site.ids[names["failed"]]},
    )
    site.sql(
        "UPDATE runs SET status = 'expired' WHERE thread_id = :t",
        {"t": site.ids[names["expired"]]},
    )
    cancelled = loopback.post(
        f"{site.url}/runs/{site.ids[names['cancelled']]}/cancel",
        headers=site.keys["olga"],
        json={"reason": "the customer called it off"},
    )
    assert cancelled.status_code == 200, cancelled.text

    page = sign_in(browser, site, "bob", f"/inbox?view=decided&q=d{width}-", width=width)
    rows = {
        word: page.locator("#queue tbody tr", has_text=f"{name}.").first
        for word, name in names.items()
    }
    snapshot(
        page,
        tmp_path,
        f"decided-{width}",
        "inbox-decided.png" if width == 1280 else "inbox-phone-decided.png",
    )
    badges = page.locator("#queue .badge").all_inner_texts()
    assert sorted(badges) == sorted(names), badges
    for word, name in names.items():
        row = page.locator("#queue tbody tr").filter(
            has=page.locator(f'a[href="/inbox/requests/{site.ids[name]}"]')
        )
        text = row.first.inner_text()
        assert row.first.locator(f'.badge[data-outcome="{word}"]').count() == 1, (word, text)
        rows[word] = row.first
    assert rows["approved"].locator(".paid").inner_text() == "EUR 49.90"
    assert rows["approved with changes"].locator(".paid").inner_text() == "EUR 150.00"
    changed = rows["approved with changes"].inner_text()
    assert "Refund EUR 150.00" in changed, changed
    assert "EUR 329.00" not in changed.replace("order total EUR 329.00", "")
    assert "the customer withdrew the claim" in rows["rejected"].inner_text()
    assert "nothing paid" in rows["rejected"].inner_text()
    assert "the payment service timed out" in rows["failed"].inner_text()
    assert "nothing paid" in rows["expired"].inner_text()
    assert "the customer called it off" in rows["cancelled"].inner_text()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, overflow

    options = page.locator("#f-outcome option").all_inner_texts()
    assert "resuming" not in options and "running" not in options
    for word in names:
        assert word in options
        page.select_option("#f-outcome", word)
        submit(page, ".filters button[type=submit]")
        assert page.locator("#queue .badge").all_inner_texts() == [word]

    page.goto(f"{site.url}/inbox/requests/{site.ids[names['approved with changes']]}")
    assert page.inner_text("#ended").startswith("approved with changes")
    assert "paid EUR 150.00" in page.inner_text("#ended")
    assert "EUR 150.00" in page.inner_text("#decided-diff")
    assert "Refund EUR 150.00" in page.inner_text("#title")
    snapshot(
        page,
        tmp_path,
        f"decided-request-{width}",
        "inbox-decided-request.png" if width == 1280 else None,
    )
    page.context.close()
