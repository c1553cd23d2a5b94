"""What a reviewer reads carries no code words, no raw ids and no UTC stamps (issue 34): an
"already decided" or "expired" refusal says who, through what and when in the reviewer's words,
the time in the display zone (``DISPLAY_TIMEZONE``), the ids and the ISO 8601 stamp behind
``details``, its reason code unchanged; Slack is given its date token (each viewer's own zone)
and the e-mail the display zone's words, never the run's id.
"""

from __future__ import annotations

import re

import pytest

from core.moments import moment
from testkit import loopback
from testkit.clock import HOUR, runner_at, waiting
from testkit.decide import claim
from worker.refusals import Refusal, Refused

ZONE = "Europe/Berlin"
RAW = re.compile(r"\b[0-9a-f]{32}\b|[0-9a-f]{8}-[0-9a-f]{4}-|UTC|\d{4}-\d\d-\d\dT|tool:|\w_id\b")
APPROVE = {"decisions": [{"type": "approve"}]}


@pytest.fixture
def zoned(monkeypatch):
    monkeypatch.setenv("DISPLAY_TIMEZONE", ZONE)


def _plain(message: str, thread_id: str) -> str:
    """No raw id (the run's, a request's hex), no UTC stamp, no code word."""
    found = RAW.search(message)
    assert not found, (found.group(), message)
    assert thread_id not in message, message
    return message


def test_an_already_decided_request_says_who_and_when_with_the_ids_in_details(store, clock, zoned):
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-words")
    claim(runner, "t-words", outcome.interrupt_id, APPROVE, "carol")
    again = claim(runner, "t-words", outcome.interrupt_id, APPROVE, "dave")
    assert isinstance(again, Refused) and again.reason == Refusal.DECIDED
    at = runner.runs.last_claim("t-words").at
    said = _plain(again.message, "t-words")
    assert said == (
        f"this request was already decided by carol through the API on {moment(at)}; "
        "a decision cannot be changed"
    )
    assert moment(at).endswith(f"({ZONE})") and moment(at) != moment(at, zone="UTC")
    assert again.details["run"] == "t-words"
    assert again.details["request"] == outcome.interrupt_id
    assert again.details["decided_at"] == moment_iso(at)


def test_an_expired_request_says_when_in_the_display_zone(store, clock, zoned):
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-words-late", expires_in="1h")
    expires = runner.runs.get("t-words-late").expires_at
    clock.now += 2 * HOUR
    late = claim(runner, "t-words-late", outcome.interrupt_id, APPROVE, "carol")
    assert isinstance(late, Refused) and late.reason == Refusal.EXPIRED
    said = _plain(late.message, "t-words-late")
    assert said.startswith(f"this request expired on {moment(expires)}; "), said
    assert late.details == {
        "run": "t-words-late",
        "request": outcome.interrupt_id,
        "expired_at": moment_iso(expires),
    }
    assert runner.runs.get("t-words-late").status == "waiting"  # the sweep expires it


def test_slack_and_mail_write_the_deadline_for_the_reader(store, clock, zoned):
    from ops.mail import body_parts
    from ops.shown import views_of
    from ops.slack import request_blocks
    from store.keys import Key, Role

    runner = runner_at(store, clock)
    waiting(runner, "t-words-channels", expires_in="1h")
    run = runner.runs.get("t-words-channels")
    views = views_of(run, runner.graphs.views)
    blocks = request_blocks(run, views)
    facts = blocks[-2]["elements"][0]["text"]
    words = moment(run.expires_at)
    token = f"<!date^{int(run.expires_at)}^{{date_short_pretty}} at {{time}}|{words}>"
    assert f"decide by {token}" in facts, facts  # Slack writes it in each viewer's zone
    _plain(facts.replace(token, ""), "t-words-channels")
    key = Key("k1", "bob", frozenset({Role.REVIEWER}), 0.0, email="bob@example.test")
    head, tail = body_parts(run, views, key)
    assert f"decide by {moment(run.expires_at)}" in head, head
    _plain(head + tail, "t-words-channels")


def moment_iso(at: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module", params=["postgres"])
def site(request, tmp_path_factory):
    from testkit.web import web_site

    yield from web_site(request, tmp_path_factory, DISPLAY_TIMEZONE=ZONE)


@pytest.mark.parametrize("width", [1280, 375])
def test_the_page_says_a_request_was_decided_in_the_viewers_zone(browser, site, width, tmp_path):

    from testkit.web import sign_in, snapshot

    name = f"words-{width}"
    run = site.start("rita", "Refund order A-1002: the lid cracked", name)
    thread_id = site.ids[name]
    page = sign_in(
        browser, site, "carol", f"/inbox/requests/{thread_id}", width=width, zone="Asia/Tokyo"
    )
    body = {**{k: run["approval"][k] for k in ("interrupt_id", "digest")}, **APPROVE}
    url = f"{site.url}/runs/{thread_id}/decision"
    first = loopback.post(url, json=body, headers=site.keys["bob"], timeout=30)
    assert first.status_code == 202, first.text
    again = loopback.post(url, json=body, headers=site.keys["mia"], timeout=30)
    error = again.json()["error"]  # the API: words in message, ids and the stamp in details
    assert again.status_code == 409 and error["code"] == "decided", error
    _plain(error["message"], thread_id)
    assert f"({ZONE})" in error["message"] and error["details"]["run"] == thread_id

    with (
        page.expect_navigation(),
        page.expect_response(lambda r: r.url.endswith("/decide")) as info,
    ):
        page.click("#approve-0")
    assert info.value.status == 409
    said = page.inner_text("#outcome")
    assert "already decided by bob through the API on " in said, said
    # the script wrote the moment in the viewer's zone (Tokyo), so no zone name is left
    stamp = page.locator("#outcome time")
    assert stamp.get_attribute("datetime") == error["details"]["decided_at"]
    assert ZONE not in said and "(" not in stamp.inner_text(), said
    assert page.locator("#refusal-details").get_attribute("open") is None  # ids behind it
    _plain(said.split("Details")[0], thread_id)
    page.click("#refusal-details summary")
    shot = "inbox-refused-decided.png" if width == 1280 else None
    snapshot(page, tmp_path, f"refused-{width}", shot)
    ids = page.inner_text("#refusal-details")
    assert run["approval"]["interrupt_id"] in ids and thread_id in ids, ids
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{overflow}px wider than the window"
    page.context.close()
