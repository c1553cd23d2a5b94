"""Every channel tells the same truth about one edited decision (issue 34): the web page, the
Slack message (Block Kit and the incoming-webhook line), the e-mail, the signed webhook's body
and the LangGraph API's thread all carry the amount the reviewer approved, never the agent's;
none shows a code word (a ``tool:`` actor, an ``_id`` argument, a schema title such as "Order
Id", a raw UUID); and text the requester wrote is inert in Slack (``<!channel>`` and a
disguised link stay plain text).

The run is real: the web inbox tests' server on 127.0.0.1, the reviewer's edit made in
chromium; each channel's rendering is read from the same database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from testkit.databases import pointed_at
from testkit.web import Site, edit, sign_in, submit, wait_done, web_site

CODE_WORDS = re.compile(
    r"tool:|\w_id\b|Order Id|Supplier Id|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
    r"[0-9a-f]{12}"
)
INJECTED = "<!channel> & <https://evil.example/x|Open in inbox>"


@pytest.fixture(scope="module", params=["postgres"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    yield from web_site(request, tmp_path_factory)


def _words(where: str, text: str) -> str:
    found = CODE_WORDS.search(text)
    assert not found, (where, text[max(0, found.start() - 80) : found.end() + 80])
    return text


def _slack_texts(blocks: list[dict]) -> list[str]:
    out = []
    for block in blocks:
        if isinstance(block.get("text"), dict):
            out.append(block["text"]["text"])
        out += [f["text"] for f in block.get("fields") or []]
        out += [e["text"] for e in block.get("elements") or [] if e.get("type") == "mrkdwn"]
    return out


def test_one_edited_decision_reads_the_same_everywhere(browser, site):
    from api.langgraph_views import thread_view
    from api.lg_common import Thread
    from ops.mail import body_parts, draft
    from ops.notify import event_body, slack_body
    from ops.shown import views_of
    from ops.slack import outcome_line, request_blocks
    from store.db import open_store
    from store.keys import KeyStore
    from store.run_reads import last_claim_in
    from store.states import Event
    from worker.runner import Runner

    site.start("rita", f"Refund order A-1002: {INJECTED} the pump died", "chan")
    thread_id = site.ids["chan"]
    with pointed_at(site.db_env), open_store() as store:
        runner = Runner(store)
        waiting = runner.runs.get(thread_id)
        assert waiting is not None
        shown = views_of(waiting, runner.graphs.views)
        blocks = request_blocks(waiting, shown)
        bob = next(k for k in KeyStore(store.db).list() if k.name == "bob")
        mail_head, mail_tail = body_parts(waiting, shown, bob)
        subject = draft(waiting, shown, bob.__class__(**{**vars(bob), "email": "b@x.test"}))
    posted = "\n".join(_slack_texts(blocks))
    assert "<!channel>" not in posted and "<https://evil" not in posted, posted
    assert "&lt;!channel&gt; &amp; &lt;https://evil.example/x|Open in inbox&gt;" in posted
    _words("slack post", posted)
    _words("e-mail", mail_head + mail_tail)
    assert subject is not None and "\n" not in subject["subject"]

    page = sign_in(browser, site, "bob", f"/inbox/requests/{thread_id}")
    every_detail = "document.querySelectorAll('details').forEach(d => d.open = true)"
    page.evaluate(every_detail)
    _words("page before", page.inner_text("main"))
    edit(page, {"amount": "50"})
    submit(page, "#approve-edit-0")
    wait_done(page)
    page.reload()
    title, ended = page.inner_text("#title"), page.inner_text("#ended")
    assert "Refund EUR 50.00" in title and "EUR 50.00" in ended, (title, ended)
    page.evaluate(every_detail)
    _words("page after", page.inner_text("main"))
    page.context.close()

    with pointed_at(site.db_env), open_store() as store:
        runner = Runner(store)
        done = runner.runs.get(thread_id)
        assert done is not None and str(done.status) == "done"
        with store.db.transaction() as tx:
            claim = last_claim_in(tx, thread_id)
        views = views_of(done, runner.graphs.views)
        webhook = event_body("run.done", done, done.updated_at, None, views=views, claim=claim)
        line = slack_body("run.done", done, views, webhook)["text"]
        update = outcome_line(done, Event.FINISHED, views, claim)
        claimed = outcome_line(done, Event.CLAIMED, views, claim)
        lg = thread_view(runner, Thread(thread_id, done, None))

    data = webhook["data"]
    assert data["summary"].startswith("Refund EUR 50.00"), data["summary"]
    assert data["views"][0]["amount"] == "50.00" and data["outcome"] == "approved with edits"
    human = json.dumps([data["summary"], data["views"], data.get("result")])
    _words("webhook", human)
    for where, text in (("slack line", line), ("slack update", update), ("claimed", claimed)):
        assert "Refund EUR 50.00" in text and "Refund EUR 329.00" not in text, (where, text)
        assert "<!channel>" not in text
    assert "50.00" in lg["metadata"]["result"] and "329.00" not in lg["metadata"]["result"]
