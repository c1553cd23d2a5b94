"""After an edit, everyone reads the band the request now needs, not only the count (issue 34).

Purchase orders up to EUR 1,000.00 need one of team-leads; above, two of finance (the authority
matrix, ``AUTHORITY_FILE``). A finance reviewer raises 4 toner cartridges (EUR 316.00) to 14 (EUR
1,106.00) in chromium, at desktop and phone width: the preview says the request then needs two
of finance instead of one team lead; the second approver's page shows the new total and that
band; the Slack message is redrawn with the changes, the total and the band, and its Approve
button approves exactly that proposal; the reviewers of the new band who have not approved get
an e-mail saying the same (the team lead of the old band does not). All of it runs for real:
uvicorn on 127.0.0.1, Postgres, ``slack_sdk`` against the local Slack stand-in, ``smtplib``
against a local SMTP server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit import loopback
from testkit.databases import api_key
from testkit.mail import MailBox, text_of
from testkit.servers import free_port
from testkit.slack import SlackStandIn, link_slack, press, signed_interaction
from testkit.wait import until
from testkit.web import Site, edit, previewed, sign_in, snapshot, submit, web_site

TOKEN = "xoxb-band-token"
SIGNING = "slack-signing-secret-for-band-tests"
TONER = "Order 4 toner cartridges for CC-100: printers are empty"
MATRIX = """
[purchase-order]
bands = [
  { up_to = "1000.00", groups = ["team-leads"] },
  { groups = ["finance"], quorum = 2 },
]
"""
FINANCE = "2 approvers, each one of finance"
ADDRESS = {n: f"{n}@example.test" for n in ("tina", "fred", "fiona", "frank")}


@pytest.fixture(scope="module")
def stand_ins() -> Iterator[tuple[SlackStandIn, MailBox]]:
    slack, box = SlackStandIn(TOKEN).start(), MailBox().start()
    yield slack, box
    slack.stop()
    box.stop()


@pytest.fixture(scope="module", params=["postgres"])
def site(request, tmp_path_factory, stand_ins) -> Iterator[Site]:
    slack, box = stand_ins
    matrix = tmp_path_factory.mktemp("authority") / "authority.toml"
    matrix.write_text(MATRIX)
    port = free_port()
    channels = {
        "AUTHORITY_FILE": str(matrix),
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING,
        "SLACK_CHANNEL": "C0ORDERS",
        "SLACK_API_URL": slack.url,
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(box.port),
        "SMTP_TLS": "none",
        "EMAIL_FROM": "Approvals <approvals@example.test>",
        "EMAIL_LINK_SECRET": "link-secret-for-band-tests-0123456789",
        "PUBLIC_URL": f"http://127.0.0.1:{port}",
    }
    for built in web_site(request, tmp_path_factory, port=port, **channels):
        groups = {"tina": "team-leads", "fred": "finance", "fiona": "finance", "frank": "finance"}
        for name, group in groups.items():
            built.keys[name] = api_key(
                built.db_env, name, "reviewer", groups=(group,), email=ADDRESS[name]
            )
        link_slack(built.url, built.keys["frank"], "UFRANK", SIGNING)
        yield built


def _message(slack: SlackStandIn, thread_id: str) -> tuple[str, dict] | None:
    """The one message about the run (its buttons name it), once posted."""
    found = [
        (ts, m)
        for ts, m in list(slack.messages.items())
        if f'"t": "{thread_id}"' in str(m["blocks"])
    ]
    assert len(found) <= 1, found
    return found[0] if found else None


def _words(message: dict) -> str:
    out = [message.get("text") or ""]
    for block in message["blocks"]:
        if isinstance(block.get("text"), dict):
            out.append(block["text"]["text"])
        out += [f["text"] for f in block.get("fields") or []]
        out += [e.get("text", "") for e in block.get("elements") or [] if e.get("type") == "mrkdwn"]
    return "\n".join(out)


def _redrawn(slack: SlackStandIn, thread_id: str, words: str) -> tuple[str, dict]:
    def shows() -> tuple[str, dict] | None:
        found = _message(slack, thread_id)
        return found if found is not None and words in _words(found[1]) else None

    return until(shows, f"the Slack message to say {words!r}", timeout=30)


@pytest.mark.parametrize("width", [1280, 375])
def test_every_later_approver_sees_the_new_total_and_the_band_it_needs(
    browser, site, stand_ins, width, tmp_path
):
    slack, box = stand_ins
    name = f"band-{width}"
    site.start("rita", TONER, name, "purchase-order")
    thread_id = site.ids[name]
    _, posted = _redrawn(slack, thread_id, "needs one of team-leads")

    fred = sign_in(browser, site, "fred", f"/inbox/requests/{thread_id}", width=width)
    assert "one of team-leads" in fred.inner_text("#needs")
    edit(fred, {"quantity": "14"})
    said = previewed(fred)
    assert "Total EUR 316.00 → EUR 1,106.00" in said, said
    assert f"it then needs {FINANCE} (now one of team-leads)" in said, said
    submit(fred, "#approve-edit-0")
    assert "1 of 2" in fred.inner_text("#outcome")

    fiona = sign_in(browser, site, "fiona", f"/inbox/requests/{thread_id}", width=width)
    diff = fiona.inner_text("#diff")
    assert "EUR 316.00" in diff and "EUR 1,106.00" in diff, diff
    needs = fiona.inner_text("#proposal-needs")
    assert f"With fred's changes it needs {FINANCE} (1 so far)." == needs, needs
    overflow = fiona.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{overflow}px wider than the window"
    shot = "inbox-po-band-after-edit.png" if width == 1280 else None
    snapshot(fiona, tmp_path, f"band-{width}", shot)
    fiona.context.close()

    # Slack: the message redrawn with the proposal, and its button approves exactly that
    _, message = _redrawn(slack, thread_id, f"needs {FINANCE}")
    words = _words(message)
    assert "Quantity 4 → 14" in words and "Total EUR 316.00 → EUR 1,106.00" in words, words
    assert "1 of 2 approvals: fred" in words, words
    assert message["blocks"] != posted["blocks"]

    # e-mail: the new band's reviewers who have not approved; not the old band's team lead
    mailed = box.wait_for(ADDRESS["fiona"], thread_id)
    assert mailed["Subject"].startswith("Changes proposed: "), mailed["Subject"]
    text = text_of(mailed)
    assert "Quantity: 4 -> 14" in text and "EUR 1,106.00" in text, text
    assert f"it needs {FINANCE} (1 so far)" in text, text
    assert f"/inbox/requests/{site.run(thread_id)['approval']['interrupt_id']}" in text
    assert not [m for m in box.to(ADDRESS["fred"], thread_id) if "Changes" in m["Subject"]]
    assert not [m for m in box.to(ADDRESS["tina"], thread_id) if "Changes" in m["Subject"]]

    body, headers = signed_interaction(press(message, "approve", "UFRANK"), SIGNING)
    pressed = loopback.post(f"{site.url}/slack/interactions", content=body, headers=headers)
    assert pressed.status_code == 200 and pressed.json()["status"] == "accepted", pressed.text
    until(lambda: site.run(thread_id)["status"] == "done", "the order placed")
    [order] = site.sql(
        "SELECT quantity, total_cents FROM purchase_orders WHERE thread_id = :t", {"t": thread_id}
    )
    assert (order["quantity"], order["total_cents"]) == (14, 110600)
    fred.context.close()
