"""A number a reviewer types is exact end to end, in graphs without a money view too (issue 34).

A plain ``create_agent`` graph (``examples.byo_agent``: its ``apply_credit(amount: float)`` has no
money view, so the page shows the tool's schema) pauses; in chromium, at desktop and phone
width, the reviewer types an amount no float can hold (``15.000000000000000001``). The preview,
the stored decision, the audit trail and the decided page all carry those digits: the page
reads a ``Decimal``, and ``core.exactjson`` stores it as the number literal typed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal

import pytest

from core import exactjson
from testkit.web import Site, edit, previewed, sign_in, snapshot, submit, wait_done, web_site

BYO = "examples.byo_agent:build_graph"
TYPED = "15.000000000000000001"  # float("15.000000000000000001") == 15.0


@pytest.fixture(scope="module", params=["postgres"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    yield from web_site(request, tmp_path_factory, API_WORKFLOWS=BYO)


def test_exact_json_keeps_every_digit_and_nothing_else_changes():
    value = {"a": Decimal(TYPED), "b": [Decimal("0.1"), 2, 0.5], "c": "exact:0:0", "d": None}
    text = exactjson.dumps(value, sort_keys=True)
    assert text == f'{{"a": {TYPED}, "b": [0.1, 2, 0.5], "c": "exact:0:0", "d": null}}'
    back = exactjson.loads(text)
    assert (
        back["a"] == Decimal(TYPED) and back["b"][0] == Decimal("0.1") and back["c"] == "exact:0:0"
    )
    plain = {"type": "edit", "n": 1, "x": 0.5}
    assert exactjson.dumps(plain) == json.dumps(plain)  # rows without a Decimal keep their form
    with pytest.raises(ValueError):
        exactjson.dumps({"a": Decimal("NaN")})


@pytest.mark.parametrize("width", [1280, 375])
def test_a_typed_number_is_exact_from_the_page_to_the_decision(browser, site, width, tmp_path):
    name = f"exact-{width}"
    site.start("rita", "Credit 15.00 to customer C-42: the delivery was late", name, BYO)
    thread_id = site.ids[name]
    page = sign_in(browser, site, "bob", f"/inbox/requests/{thread_id}", width=width)
    edit(page, {"amount": TYPED})
    said = previewed(page)
    assert f"→ {TYPED}" in said, said
    submit(page, "#approve-edit-0")
    wait_done(page)
    [row] = site.sql("SELECT decision FROM runs WHERE thread_id = :t", {"t": thread_id})
    assert f'"amount": {TYPED}' in row["decision"], row["decision"]
    assert exactjson.loads(row["decision"])["decisions"][0]["edited_action"]["args"]["amount"] == (
        Decimal(TYPED)
    )
    trail = site.sql(
        "SELECT detail FROM run_events WHERE thread_id = :t AND reason = 'decision claimed'",
        {"t": thread_id},
    )
    assert any(TYPED in (e["detail"] or "") for e in trail), trail
    page.reload()
    decided = page.inner_text("#decided")
    assert TYPED in decided, decided
    snapshot(page, tmp_path, f"exact-{width}")
    wide = page.evaluate(
        "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right"
        " > window.innerWidth).map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 8)"
    )
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{overflow}px wider than the window: {wide}"
    page.context.close()
