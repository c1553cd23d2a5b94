"""Approval authority: who may approve what, by amount band, on every channel through the one
decision path (the API, the web inbox, the inbox CLI, a signed webhook, a polled inbox and Slack,
each refusing with the same clear reason); an edit into a higher band needs the higher authority;
the matrix is checked at start-up with one-line errors and fixed on the run when it pauses; JWT
groups are read strictly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest

from api.auth import JwtVerifier
from api.errors import ApiError
from core import settings
from core.authority import MatrixError, parse_matrix
from core.errors import UserError
from core.hitl import HitlRequest
from core.identity import Principal, Provenance
from store.db import open_store
from testkit import loopback
from testkit.databases import environment, fresh_database
from testkit.slack import SlackStandIn, link_slack, signed_interaction
from testkit.sources import SOURCES, Site, answered, edit_to, page_session, result_of
from testkit.webapp import LOCAL_SECRET, answered_event, api_key, sign, start_server, worker_env
from worker.cli import answer_request
from worker.refusals import Refusal
from worker.runner import Runner

MATRIX = """
[refund]
bands = [
  { up_to = "500.00", groups = ["support-leads"] },
  { groups = ["finance"] },
]
"""
SMALL, BIG = "Refund order A-1002: it leaks", "Refund order A-1004: wobbly"  # 329.00, 540.00
APPROVE = [{"type": "approve"}]
SIGNING = "slack-signing-secret-for-authority-tests"
SLACK_USERS = {"sam": "USAM", "fay": "UFAY", "nick": "UNICK"}


@pytest.fixture(scope="module")
def site(tmp_path_factory, postgres_url) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("authority")
    matrix = tmp / "authority.toml"
    matrix.write_text(MATRIX)
    slack = SlackStandIn("xoxb-authority").start()
    policy = {"AUTHORITY_FILE": str(matrix)}
    channels = {
        "SLACK_BOT_TOKEN": "xoxb-authority",
        "SLACK_SIGNING_SECRET": SIGNING,
        "SLACK_CHANNEL": "C0APPROVALS",
        "SLACK_API_URL": slack.url,
    }
    with fresh_database("postgres", tmp, postgres_url) as db_env:
        server = start_server(worker_env(db_env, **policy, **channels), tmp / "uvicorn.log")
        keys = {
            "rita": api_key(db_env, "rita", "requester"),
            "sam": api_key(db_env, "sam", "reviewer", groups=("support-leads",)),
            "fay": api_key(db_env, "fay", "reviewer", groups=("finance", "audit")),
            "nick": api_key(db_env, "nick", "reviewer"),
        }
        for who, user in SLACK_USERS.items():  # each reviewer links their Slack user
            link_slack(server.url, keys[who], user, SIGNING)
        # warm up: the first run imports LangGraph in the server (slow on a busy machine)
        warm = {"input": SMALL, "thread_id": "t-warm"}
        loopback.post(f"{server.url}/runs", json=warm, headers=keys["rita"], timeout=120)
        with environment({**db_env, **policy}), open_store() as store:
            yield Site(server.url, Runner(store), keys)
        server.stop()
    slack.stop()


def _press(site: Site, run: dict, decisions: list[dict], who: str) -> httpx.Response:
    """A signed Slack button press (Approve or Reject) on the run's request, by ``who``."""
    kind = decisions[0]["type"]
    approval = run["approval"]
    value = json.dumps(
        {"t": run["thread_id"], "i": approval["interrupt_id"], "d": approval["digest"]}
    )
    payload = {
        "type": "block_actions",
        "user": {"id": SLACK_USERS[who], "name": who},
        "actions": [{"action_id": kind, "value": value, "type": "button"}],
    }
    body, headers = signed_interaction(payload, SIGNING)
    return loopback.post(
        f"{site.url}/slack/interactions", content=body, headers=headers, timeout=30
    )


def via_slack(site: Site, run: dict, decisions: list[dict], who: str) -> tuple:
    reply = _press(site, run, decisions, who)
    if reply.status_code >= 400:
        return ("refused", Refusal[reply.json()["error"]["code"].upper()])
    if reply.json()["status"] == "approval recorded":
        return ("pending", reply.json()["approvers"])
    return ("applied", None)


# Slack has two buttons, Approve and Reject: it cannot edit
CHANNELS = {**SOURCES, "slack": via_slack}


def outside_band(site: Site, via) -> tuple:
    return via(site, site.start(BIG), APPROVE, "sam")


def in_band(site: Site, via) -> tuple:
    return via(site, site.start(BIG), APPROVE, "fay")


def low_band(site: Site, via) -> tuple:
    return via(site, site.start(SMALL), APPROVE, "sam")


def no_group(site: Site, via) -> tuple:
    return via(site, site.start(SMALL), APPROVE, "nick")


def _partial(site: Site) -> dict:
    """A run on A-1004 (540.00) that proposes a partial 400.00, in the lower band: an edit up
    to 520.00 stays within what is refundable and moves into the higher band."""
    run = site.start(BIG)
    request = site.runner.runs.get(run["thread_id"]).request.to_json()
    request["action_requests"][0]["args"]["amount"] = 400.0
    digest = HitlRequest.parse(request).digest()
    site.runner.store.db.execute(
        "UPDATE runs SET request = :r, request_digest = :d WHERE thread_id = :t",
        {"r": json.dumps(request), "d": digest, "t": run["thread_id"]},
    )
    site.runner.store.db.execute(  # the local inbox's copy too: the CLI decides on what it shows
        "UPDATE inbox_requests SET request = :r WHERE id = :i",
        {"r": json.dumps(request), "i": run["approval"]["interrupt_id"]},
    )
    run["approval"]["digest"] = digest
    return run


def edit_into_higher_band(site: Site, via) -> tuple:
    return via(site, _partial(site), edit_to(520.0, order="A-1004"), "sam")


def edit_into_higher_band_by_finance(site: Site, via) -> tuple:
    return via(site, _partial(site), edit_to(520.0, order="A-1004"), "fay")


def reject_needs_no_authority(site: Site, via) -> tuple:
    return via(site, site.start(BIG), [{"type": "reject", "message": "no"}], "nick")


SITUATIONS = {
    outside_band: ("refused", Refusal.AUTHORITY),
    in_band: ("applied", None),
    low_band: ("applied", None),
    no_group: ("refused", Refusal.AUTHORITY),
    edit_into_higher_band: ("refused", Refusal.AUTHORITY),
    edit_into_higher_band_by_finance: ("applied", None),
    reject_needs_no_authority: ("applied", None),
}


EDITS = {edit_into_higher_band, edit_into_higher_band_by_finance}


@pytest.mark.parametrize("situation", list(SITUATIONS), ids=lambda f: f.__name__)
def test_every_channel_applies_the_authority_matrix(site, situation):
    channels = SOURCES if situation in EDITS else CHANNELS
    got = {name: situation(site, via) for name, via in channels.items()}
    assert got == {name: SITUATIONS[situation] for name in channels}


def _said(site: Site, channel: str, run: dict, who: str) -> str:
    """What a refused approval tells the person on ``channel``, in its own way."""
    approval = run["approval"]
    if channel == "api":
        body = {**{k: approval[k] for k in ("interrupt_id", "digest")}, "decisions": APPROVE}
        url = f"{site.url}/runs/{run['thread_id']}/decision"
        return loopback.post(url, json=body, headers=site.keys[who], timeout=30).json()["error"][
            "message"
        ]
    if channel == "page":
        client = page_session(site, who)
        try:
            page = client.get(f"/inbox/requests/{run['thread_id']}").text
            csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
            form = {
                "csrf": csrf,
                "d0": "approve",
                **{k: approval[k] for k in ("interrupt_id", "digest")},
            }
            reply = client.post(f"/inbox/requests/{run['thread_id']}/decide", data=form)
        finally:
            client.close()
        return re.search(r'<section class="outcome[^>]*>\s*<p>([^<]*)</p>', reply.text).group(1)
    if channel == "cli":
        result = answer_request(site.runner, approval["interrupt_id"], lambda _: APPROVE, who)
        assert result_of(result)[0] == "refused"
        return result.message
    if channel == "webhook":
        items = [{"name": "issue_refund", "decision": "approve", "decidedByName": who}]
        body = answered_event(
            approval["interrupt_id"], run["thread_id"], items, app="approval-worker"
        )
        site.counter += 1
        headers = sign(body, secret=LOCAL_SECRET, msg_id=f"msg_said_{site.counter}")
        reply = loopback.post(
            f"{site.url}/webhooks/local", content=body, headers=headers, timeout=30
        )
        return reply.json()["reason"]
    if channel == "sweep":
        answer = answered(run["thread_id"], approval["interrupt_id"], APPROVE, who)
        return site.runner.decide(site.runner.sweeper.decision_of(run["thread_id"], answer)).message
    return _press(site, run, APPROVE, who).json()["error"]["message"]


def test_every_channel_says_what_is_needed_and_what_the_approver_holds(site):
    reason = "approving this request (540.00) needs one of finance; sam is in support-leads"
    run = site.start(BIG)
    said = {channel: _said(site, channel, run, "sam") for channel in CHANNELS}
    assert {c: reason in text for c, text in said.items()} == dict.fromkeys(CHANNELS, True), said
    assert site.runner.runs.get(run["thread_id"]).status == "waiting"


def test_the_refusal_says_what_is_needed_and_changes_nothing(site):
    run = site.start(BIG)
    before = site.runner.runs.events(run["thread_id"])
    body = {
        "interrupt_id": run["approval"]["interrupt_id"],
        "digest": run["approval"]["digest"],
        "decisions": APPROVE,
    }
    reply = loopback.post(
        f"{site.url}/runs/{run['thread_id']}/decision", json=body, headers=site.keys["sam"]
    )
    assert reply.status_code == 403
    assert reply.json()["error"] == {
        "code": "authority",
        "message": "approving this request (540.00) needs one of finance; sam is in support-leads",
    }
    assert site.runner.runs.events(run["thread_id"]) == before
    assert site.runner.runs.get(run["thread_id"]).status == "waiting"


def test_the_request_shows_who_may_approve_it(site):
    big, small = site.start(BIG), site.start(SMALL)
    assert big["approval"]["needs"] == "one of finance"
    reply = loopback.get(f"{site.url}/runs/{small['thread_id']}", headers=site.keys["sam"])
    assert reply.json()["approval"]["needs"] == "one of support-leads"
    client = page_session(site, "fay")
    try:
        page = client.get(f"/inbox/requests/{big['thread_id']}").text
    finally:
        client.close()
    assert '<dd id="needs">one of finance</dd>' in page


def test_the_bands_are_fixed_on_the_run_when_it_pauses(site, tmp_path, monkeypatch):
    run = site.start(BIG)
    looser = tmp_path / "looser.toml"
    looser.write_text('[refund]\nbands = [ { groups = ["support-leads"] } ]\n')
    monkeypatch.setenv("AUTHORITY_FILE", str(looser))
    assert SOURCES["cli"](site, run, APPROVE, "sam") == ("refused", Refusal.AUTHORITY)


def test_keys_get_groups_through_the_api(site, tmp_path):
    admin = api_key({**_db_env(site)}, "ada", "admin")
    reply = loopback.post(
        f"{site.url}/keys",
        json={"name": "gus", "roles": ["reviewer"], "groups": ["finance"]},
        headers=admin,
    )
    assert reply.status_code == 201, reply.text
    assert reply.json()["groups"] == ["finance"]
    bad = loopback.post(
        f"{site.url}/keys",
        json={"name": "gus", "roles": ["reviewer"], "groups": ["fin ance"]},
        headers=admin,
    )
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid_groups"


def _db_env(site: Site) -> dict[str, str]:
    import os

    return {k: os.environ[k] for k in ("DATABASE_URL",) if k in os.environ}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[refund\n", "not valid TOML"),
        ("[refund]\nbands = []\n", "[refund]: bands must be a non-empty list"),
        ("[refund]\nlimit = 1\n", "[refund] must hold exactly one key, bands = [ ... ]"),
        (
            '[refund]\nbands = [ { up_to = "5", groups = ["a"] } ]\n',
            "[refund]: the last band must omit up_to",
        ),
        (
            '[refund]\nbands = [ { up_to = "5", groups = ["a"] }, { up_to = "4", groups = ["b"] },'
            ' { groups = ["c"] } ]\n',
            "[refund] band 2: up_to must rise from band to band",
        ),
        (
            '[refund]\nbands = [ { groups = "finance" } ]\n',
            "[refund] band 1: groups must be a list",
        ),
        ('[refund]\nbands = [ { groups = ["a"], quorum = 0 } ]\n', "quorum must be a whole"),
        ('[refund]\nbands = [ { groups = ["a"], who = 1 } ]\n', "unknown key 'who'"),
        ('[refund]\nbands = [ { up_to = "x", groups = ["a"] }, { groups = ["b"] } ]\n', "not an"),
    ],
)
def test_a_bad_matrix_is_one_line_error(text, error):
    with pytest.raises(MatrixError) as raised:
        parse_matrix(text)
    assert error in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_setting_is_checked_at_start_up(tmp_path, monkeypatch):
    bad = tmp_path / "bad.toml"
    bad.write_text("[refund]\nbands = [ { groups = [] } ]\n")
    monkeypatch.setenv("AUTHORITY_FILE", str(bad))
    with pytest.raises(UserError) as raised:
        settings.check()
    message = str(raised.value)
    assert message.startswith("AUTHORITY_FILE=") and "groups must be a list" in message
    monkeypatch.setenv("AUTHORITY_FILE", str(tmp_path / "missing.toml"))
    with pytest.raises(UserError, match="cannot be read"):
        settings.check()
    good = tmp_path / "good.toml"
    good.write_text(MATRIX)
    monkeypatch.setenv("AUTHORITY_FILE", str(good))
    settings.check()
    assert settings.AUTHORITY_FILE.get()["refund"].bands[0].groups == ("support-leads",)


@pytest.mark.parametrize(
    ("claim", "groups"),
    [
        (None, frozenset()),
        (["finance", " audit "], frozenset({"finance", "audit"})),
        ([], frozenset()),
    ],
)
def test_jwt_groups_are_read_from_the_claim(claim, groups):
    verifier = JwtVerifier.__new__(JwtVerifier)
    verifier.groups_claim = "groups"
    claims = {} if claim is None else {"groups": claim}
    assert verifier._groups(claims) == groups


@pytest.mark.parametrize("claim", ["finance", {"finance": True}, [1], ["ok", ""], ["x" * 101]])
def test_jwt_groups_that_are_not_a_list_of_names_are_refused(claim):
    verifier = JwtVerifier.__new__(JwtVerifier)
    verifier.groups_claim = "groups"
    with pytest.raises(ApiError) as raised:
        verifier._groups({"groups": claim})
    assert raised.value.status == 401


def test_a_principal_has_no_groups_unless_given():
    assert Principal("a", frozenset(), "jwt", Provenance.JWT).groups == frozenset()
