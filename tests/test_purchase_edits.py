"""Purchase-order edits (issue 34), in Debian chromium at desktop and phone width: the workflow
says what a reviewer may change (how many, from whom, why) and what follows (the unit price is
the supplier's catalogue price; the total is quantity × price). A supplier switch re-prices
from the catalogue or is refused; a quantity that lifts the total into the quorum band says so
in the preview, and the second approver sees the new total and the approvals it needs.

The server is the web inbox tests' (``testkit.web``) with purchase orders over EUR 1,000.00
needing two approvers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit import loopback
from testkit.web import Site, edit, previewed, sign_in, snapshot, submit, wait_done, web_site

WIDTHS = [1280, 375]
TONER = "Order 4 toner cartridges for CC-100: printers are empty"
ORDERS = "SELECT supplier_id, quantity, unit_price_cents, total_cents FROM purchase_orders "


@pytest.fixture(scope="module", params=["postgres"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    policy = {"PURCHASE_ORDER_QUORUM_AMOUNT": "1000", "PURCHASE_ORDER_QUORUM": "2"}
    yield from web_site(request, tmp_path_factory, **policy)


def _orders(site: Site, name: str) -> list[dict]:
    return site.sql(ORDERS + "WHERE thread_id = :t", {"t": site.ids[name]})


def _fits(page) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{overflow}px wider than the window"


@pytest.mark.parametrize("width", WIDTHS)
def test_a_supplier_switch_is_re_priced_from_the_catalogue(browser, site, width, tmp_path):
    name = f"po-switch-{width}"
    site.start("rita", TONER, name, "purchase-order")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids[name]}", width=width)
    edit(page, {})
    for fixed in ("cost_center", "item", "unit_price"):
        assert page.locator(f"#a0-{fixed}").get_attribute("readonly") is not None, fixed
    assert "follows from the other values" in page.inner_text("#edit-0")
    supplier = page.locator("#a0-supplier_id")  # picked from the catalogue, by name
    assert supplier.evaluate("e => e.tagName") == "SELECT"
    names = supplier.locator("option").all_inner_texts()
    assert names == ["Northwind Office Supply", "Contoso Hardware", "Fabrikam Facilities"], names
    edit(page, {"supplier_id": "SUP-02"})
    said = previewed(page)
    assert "Supplier Northwind Office Supply → Contoso Hardware" in said, said
    assert "SUP-0" not in said, said
    assert "Unit price EUR 79.00 → EUR 82.50" in said, said
    assert "Total EUR 316.00 → EUR 330.00" in said, said
    _fits(page)
    snapshot(
        page,
        tmp_path,
        f"po-switch-{width}",
        "inbox-po-supplier-switch.png" if width == 1280 else None,
    )
    submit(page, "#approve-edit-0")
    wait_done(page)
    [order] = _orders(site, name)
    assert (order["supplier_id"], order["unit_price_cents"], order["total_cents"]) == (
        "SUP-02",
        8250,
        33000,
    )
    page.context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_supplier_that_does_not_list_the_item_is_refused(browser, site, width):
    name = f"po-refused-{width}"
    before = site.start("rita", TONER, name, "purchase-order")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids[name]}", width=width)
    edit(page, {"supplier_id": "SUP-03"})
    with (
        page.expect_navigation(),
        page.expect_response(lambda r: r.url.endswith("/decide")) as info,
    ):
        page.click("#approve-edit-0")
    assert info.value.status == 422
    said = page.inner_text("#err-0-supplier_id")
    assert "Fabrikam Facilities does not list toner cartridge" in said, said
    after = site.run(site.ids[name])
    assert after["status"] == "waiting" and after["approval"] == before["approval"]
    assert _orders(site, name) == []
    _fits(page)
    page.context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_supplier_not_in_the_catalogue_is_refused(browser, site, width):
    name = f"po-unlisted-{width}"
    before = site.start("rita", TONER, name, "purchase-order")
    page = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids[name]}", width=width)
    edit(page, {})
    # a forged form: an option the catalogue does not have, posted as the page would post it
    page.evaluate(
        """() => { const s = document.querySelector('#a0-supplier_id');
        s.add(new Option('Initech', 'SUP-99')); s.value = 'SUP-99';
        s.dispatchEvent(new Event('change')); }"""
    )
    with (
        page.expect_navigation(),
        page.expect_response(lambda r: r.url.endswith("/decide")) as info,
    ):
        page.click("#approve-edit-0")
    assert info.value.status == 422
    assert "choose one of the options" in page.inner_text("#err-0-supplier_id")
    options = page.locator("#a0-supplier_id option").all_inner_texts()
    assert "Initech" not in options, options
    after = site.run(site.ids[name])
    assert after["status"] == "waiting" and after["approval"] == before["approval"]
    # the API is refused the same, by the workflow's check
    approval = after["approval"]
    args = {**approval["action_requests"][0]["args"], "supplier_id": "SUP-99"}
    reply = loopback.post(
        f"{site.url}/runs/{site.ids[name]}/decision",
        json={
            "interrupt_id": approval["interrupt_id"],
            "digest": approval["digest"],
            "decisions": [
                {"type": "edit", "edited_action": {"name": "create_purchase_order", "args": args}}
            ],
        },
        headers=site.keys["bob"],
        timeout=30,
    )
    assert reply.status_code == 422 and "not a known supplier" in reply.text, reply.text
    assert _orders(site, name) == []
    _fits(page)
    page.context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_second_approver_sees_the_new_total_and_the_approvals_it_needs(
    browser, site, width, tmp_path
):
    name = f"po-quorum-{width}"
    site.start("rita", TONER, name, "purchase-order")
    bob = sign_in(browser, site, "bob", f"/inbox/requests/{site.ids[name]}", width=width)
    edit(bob, {"quantity": "14"})
    said = previewed(bob)
    assert "Total EUR 316.00 → EUR 1,106.00" in said, said
    assert "it then needs 2 approvers (now one approver)" in said, said
    submit(bob, "#approve-edit-0")
    assert "1 of 2" in bob.inner_text("#outcome")
    assert bob.locator("#approve-proposal").count() == 0  # not offered his own proposal
    assert "You approved this" in bob.inner_text("#proposal-yours")
    assert _orders(site, name) == []

    carol = sign_in(browser, site, "carol", f"/inbox/requests/{site.ids[name]}", width=width)
    diff = carol.inner_text("#diff")
    assert "Quantity" in diff and "14" in diff, diff
    assert "EUR 316.00" in diff and "EUR 1,106.00" in diff, diff
    assert "needs 2 approvers (1 so far)" in carol.inner_text("#proposal-needs")
    _fits(carol)
    snapshot(
        carol,
        tmp_path,
        f"po-quorum-{width}",
        "inbox-po-quorum-total.png" if width == 1280 else None,
    )
    submit(carol, "#approve-proposal")
    wait_done(carol)
    [order] = _orders(site, name)
    assert (order["quantity"], order["total_cents"]) == (14, 110600)
    bob.context.close()
    carol.context.close()
