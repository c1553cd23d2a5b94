"""Delegation (issue 25): alice lends her authority to bob until a date; bob decides "for" her
(the API's ``on_behalf_of``, the page's "Decide as") and the decision and the audit trail say
"bob for alice"; it stops at its end and when revoked; it never approves a request either of them
made and never chains; a quorum counts distinct principals and people; "waiting on me" follows
the authority matrix and the delegations. Real HTTP to a real uvicorn, on both backends.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from store.db import open_store
from testkit import loopback
from testkit.databases import environment, fresh_database
from testkit.receiver import Receiver
from testkit.sources import Site, page_session
from testkit.tables import settled_tables as tables
from testkit.wait import past
from testkit.web import sign_in
from testkit.webapp import api_key, start_server, worker_env
from worker.runner import Runner

MATRIX = """
[refund]
bands = [
  { up_to = "500.00", groups = ["support-leads"] },
  { groups = ["finance"], quorum = 2 },
]
"""
SMALL, BIG = "Refund order A-1002: it leaks", "Refund order A-1004: wobbly"  # 329.00, 540.00
APPROVE = [{"type": "approve"}]
PEOPLE = {
    "rita": (("requester",), ()),
    "alice": (("requester", "reviewer"), ("finance", "support-leads")),
    "bob": (("requester", "reviewer"), ()),
    "carol": (("reviewer",), ()),
    "dave": (("reviewer",), ("finance",)),
    "fay": (("reviewer",), ("finance",)),
    "olga": (("operator",), ()),
}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp(f"delegation-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    matrix = tmp / "authority.toml"
    matrix.write_text(MATRIX)
    policy = {"AUTHORITY_FILE": str(matrix), "SEPARATION_OF_DUTIES": "0"}
    receiver = Receiver().start()  # an operator's alerting endpoint
    with fresh_database(request.param, tmp, pg) as db_env:
        env = worker_env(db_env, **policy, NOTIFY_URLS=receiver.url)
        server = start_server(env, tmp / "uvicorn.log")
        keys = {
            name: api_key(db_env, name, *roles, groups=groups)
            for name, (roles, groups) in PEOPLE.items()
        }
        warm = {"input": SMALL, "thread_id": "t-warm"}  # LangGraph's first import is slow
        loopback.post(f"{server.url}/runs", json=warm, headers=keys["rita"], timeout=120)
        with environment({**db_env, **policy}), open_store() as store:
            site = Site(server.url, Runner(store), keys)
            site.db_env = db_env  # type: ignore[attr-defined]
            site.receiver = receiver  # type: ignore[attr-defined]
            yield site
        server.stop()
    receiver.stop()


@pytest.fixture(autouse=True)
def no_delegations(request):
    """Each test on the site starts with nobody acting for anybody (revoked rows stay)."""
    if "site" in request.fixturenames:
        db = request.getfixturevalue("site").runner.store.db
        db.execute("UPDATE delegations SET revoked_at = 1 WHERE revoked_at IS NULL")


def _in(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


def delegate(site: Site, by: str, to: str, **delta: float) -> dict:
    reply = loopback.post(
        f"{site.url}/me/delegations",
        json={"delegate": to, "ends_at": _in(**(delta or {"days": 7}))},
        headers=site.keys[by],
        timeout=30,
    )
    assert reply.status_code == 201, reply.text
    return reply.json()


def decide(site: Site, run: dict, who: str, for_: str | None = None, decisions=APPROVE):
    body = {
        "interrupt_id": run["approval"]["interrupt_id"],
        "digest": run["approval"]["digest"],
        "decisions": decisions,
        **({"on_behalf_of": for_} if for_ is not None else {}),
    }
    return loopback.post(
        f"{site.url}/runs/{run['thread_id']}/decision",
        json=body,
        headers=site.keys[who],
        timeout=30,
    )


def refused(reply: httpx.Response) -> tuple[int, str, str]:
    error = reply.json()["error"]
    assert set(error) - {"details"} == {"code", "message"}  # ids, if any, behind details
    return reply.status_code, error["code"], error["message"]


def claim_of(site: Site, thread_id: str) -> dict:
    """The run's claim, as an operator reads its history."""
    reply = loopback.get(
        f"{site.url}/runs/{thread_id}/history", headers=site.keys["olga"], timeout=30
    )
    [claim] = [e for e in reply.json()["events"] if e["reason"] == "decision claimed"]
    return claim


def test_a_delegate_approves_for_the_delegator_and_both_names_are_recorded(site):
    run = site.start(SMALL)
    assert refused(decide(site, run, "bob"))[:2] == (403, "authority")
    made = delegate(site, "alice", "bob")
    assert made["delegator"] == "alice" and made["delegate"] == "bob"
    assert made["groups"] == ["finance", "support-leads"]  # what alice held when she delegated
    listed = loopback.get(f"{site.url}/me/delegations", headers=site.keys["bob"], timeout=30)
    assert [d["id"] for d in listed.json()["delegations"]] == [made["id"]]
    reply = decide(site, run, "bob", for_="Alice")  # named like any reviewer: case aside
    assert reply.status_code == 202 and reply.json()["status"] == "accepted", reply.text
    site.settle()
    assert claim_of(site, run["thread_id"])["detail"]["approvers"] == ["bob for alice"]
    today = datetime.now(UTC).date()
    export = loopback.get(
        f"{site.url}/audit/export",
        params={"from": str(today), "to": str(today + timedelta(days=1)), "format": "jsonl"},
        headers=site.keys["olga"],
        timeout=30,
    )
    [record] = [
        json.loads(line)
        for line in export.text.splitlines()
        if run["thread_id"] in line and '"approvers"' in line
    ]
    assert record["approvers"] == ["bob for alice"]


def test_a_delegation_stops_when_revoked_and_at_its_end(site):
    made = delegate(site, "alice", "bob")
    run = site.start(SMALL)
    revoked = loopback.post(
        f"{site.url}/me/delegations/{made['id']}/revoke", headers=site.keys["alice"], timeout=30
    )
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    before = tables(site.db_env)  # type: ignore[attr-defined]
    status, code, message = refused(decide(site, run, "bob", for_="alice"))
    assert (status, code) == (403, "delegation")
    assert message.startswith("bob holds no delegation from alice now")
    again = loopback.post(
        f"{site.url}/me/delegations/{made['id']}/revoke", headers=site.keys["alice"], timeout=30
    )
    assert refused(again)[:2] == (409, "delegation_ended")
    assert tables(site.db_env) == before  # type: ignore[attr-defined]
    during = site.start(SMALL)
    brief = delegate(site, "alice", "bob", seconds=5)
    assert decide(site, during, "bob", for_="alice").status_code == 202
    # started once `during` has refunded (the books start again), so approving it is judged on
    # the delegation alone, not refused as more than the order has left
    after = site.start(SMALL)
    past(brief["ends_at"] + 0.1, "the delegation's end, judged by the server's clock")
    assert refused(decide(site, after, "bob", for_="alice"))[:2] == (403, "delegation")


def test_a_delegation_never_approves_a_request_either_person_made(site):
    delegate(site, "alice", "bob")
    for requester in ("bob", "alice"):
        run = site.start(SMALL, requester=requester)
        status, code, message = refused(decide(site, run, "bob", for_="alice"))
        assert (status, code) == (403, "duties"), requester
        assert f"{requester} asked for this request;" in message and run["thread_id"] not in message
        assert "a delegation never lets anyone approve their own request" in message
    # rejecting needs no authority and approves nothing: it stands, recorded for alice
    reply = decide(site, run, "bob", for_="alice", decisions=[{"type": "reject", "message": "no"}])
    assert reply.status_code == 202
    site.settle()
    assert claim_of(site, run["thread_id"])["detail"]["approvers"] == ["bob for alice"]


def test_a_delegation_does_not_chain(site):
    delegate(site, "alice", "bob")
    delegate(site, "bob", "carol")
    run = site.start(SMALL)
    assert refused(decide(site, run, "carol", for_="alice"))[:2] == (403, "delegation")
    status, code, message = refused(decide(site, run, "carol", for_="bob"))
    assert (status, code) == (403, "authority")  # bob lent his own groups: none
    assert message.endswith("carol for bob is in no group")
    assert decide(site, run, "bob", for_="alice").status_code == 202


def test_a_quorum_counts_distinct_principals_and_people(site):
    delegate(site, "alice", "fay")
    run = site.start(BIG)  # 540.00: finance, two approvers
    first = decide(site, run, "fay", for_="alice")
    assert first.status_code == 202 and first.json()["approvers"] == ["fay for alice"]
    for who, for_ in (("alice", None), ("fay", None)):  # alice's approval; fay acted already
        status, code, message = refused(decide(site, run, who, for_=for_))
        assert (status, code) == (409, "repeated"), who
        assert message.startswith("fay for alice already approved")
    done = decide(site, run, "dave")
    assert done.json()["status"] == "accepted", done.text
    site.settle()
    assert claim_of(site, run["thread_id"])["detail"]["approvers"] == ["fay for alice", "dave"]
    run = site.start(BIG)
    assert decide(site, run, "alice").status_code == 202
    assert refused(decide(site, run, "fay", for_="alice"))[:2] == (409, "repeated")


@pytest.mark.parametrize(
    ("body", "code", "status"),
    [
        ({"delegate": "bob", "ends_at": "2020-01-01T00:00:00Z"}, "invalid_end", 422),
        ({"delegate": "bob", "ends_at": "tomorrow"}, "invalid_end", 422),
        ({"delegate": "bob", "ends_at": _in(days=91)}, "invalid_end", 422),
        ({"delegate": "bob", "ends_at": _in(days=1).replace("+00:00", "")}, "invalid_end", 422),
        ({"delegate": " ALICE ", "ends_at": _in(days=1)}, "invalid_delegate", 422),
        ({"delegate": "b\u202eob", "ends_at": _in(days=1)}, "invalid_delegate", 422),
        ({"delegate": "bob", "ends_at": _in(days=1), "groups": ["x"]}, "invalid", 422),
    ],
)
def test_a_bad_delegation_is_refused_and_changes_nothing(site, body, code, status):
    before = tables(site.db_env)  # type: ignore[attr-defined]
    reply = loopback.post(
        f"{site.url}/me/delegations", json=body, headers=site.keys["alice"], timeout=30
    )
    got = refused(reply)
    assert got[0] == status and (got[1] == code or code == "invalid"), reply.text
    assert tables(site.db_env) == before  # type: ignore[attr-defined]


def test_only_its_people_revoke_a_delegation(site):
    made = delegate(site, "alice", "bob")
    other = loopback.post(
        f"{site.url}/me/delegations/{made['id']}/revoke", headers=site.keys["carol"], timeout=30
    )
    assert refused(other)[:2] == (404, "unknown_delegation")
    declined = loopback.post(
        f"{site.url}/me/delegations/{made['id']}/revoke", headers=site.keys["bob"], timeout=30
    )
    assert declined.status_code == 200


def _queue(client: httpx.Client, mine: bool = True) -> set[str]:
    page = client.get("/inbox", params={"mine": "1"} if mine else {}).text
    return set(re.findall(r'href="/inbox/requests/(t-[^"]+)"', page))


def test_waiting_on_me_follows_the_matrix_and_the_delegations(site):
    small, big = site.start(SMALL), site.start(BIG)
    own = site.start(SMALL, requester="alice")
    waiting = {small["thread_id"], big["thread_id"], own["thread_id"]}
    bob, dave = page_session(site, "bob"), page_session(site, "dave")
    try:
        assert waiting <= _queue(bob, mine=False)  # he sees them all
        assert not waiting & _queue(bob)  # but none is his to approve
        assert _queue(dave) & waiting == {big["thread_id"]}  # finance: the big one only
        delegate(site, "alice", "bob")
        # for alice: both bands; never alice's own request
        assert _queue(bob) & waiting == {small["thread_id"], big["thread_id"]}
        assert decide(site, big, "alice").status_code == 202  # alice's approval is counted
        assert _queue(bob) & waiting == {small["thread_id"]}
        assert _queue(dave) & waiting == {big["thread_id"]}
    finally:
        bob.close()
        dave.close()


def test_the_page_delegates_decides_for_and_revokes(site):
    alice = page_session(site, "alice")
    bob = page_session(site, "bob")
    try:
        page = alice.get("/inbox/delegations").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        until = (datetime.now(UTC) + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
        bad = alice.post(
            "/inbox/delegations", data={"csrf": "x", "delegate": "bob", "ends_at": until}
        )
        assert bad.status_code == 403
        made = alice.post(
            "/inbox/delegations", data={"csrf": csrf, "delegate": "bob", "ends_at": until}
        )
        assert made.status_code == 303
        page = alice.get("/inbox/delegations").text
        assert "to <strong>bob</strong>" in page
        [delegation_id] = re.findall(r'id="revoke-([0-9a-f]+)"', page)
        self_ = alice.post(
            "/inbox/delegations", data={"csrf": csrf, "delegate": "Alice", "ends_at": until}
        )
        assert self_.status_code == 422 and "cannot delegate to yourself" in self_.text
        run = site.start(SMALL)
        request_page = bob.get(f"/inbox/requests/{run['thread_id']}").text
        assert ">bob for alice</option>" in request_page
        form = {
            "csrf": re.search(r'name="csrf" value="([^"]+)"', request_page).group(1),
            "interrupt_id": run["approval"]["interrupt_id"],
            "digest": run["approval"]["digest"],
            "d0": "approve",
            "on_behalf_of": "alice",
        }
        applied = bob.post(f"/inbox/requests/{run['thread_id']}/decide", data=form)
        assert 'class="outcome applied"' in applied.text, applied.text[:2000]
        site.settle()
        assert claim_of(site, run["thread_id"])["detail"]["approvers"] == ["bob for alice"]
        revoked = alice.post(f"/inbox/delegations/{delegation_id}/revoke", data={"csrf": csrf})
        assert revoked.status_code == 303
        assert 'id="given-none"' in alice.get("/inbox/delegations").text
        run = site.start(SMALL)
        request_page = bob.get(f"/inbox/requests/{run['thread_id']}").text
        assert "bob for alice" not in request_page
        form.update(interrupt_id=run["approval"]["interrupt_id"], digest=run["approval"]["digest"])
        late = bob.post(f"/inbox/requests/{run['thread_id']}/decide", data=form)
        assert late.status_code == 403 and 'data-reason="delegation"' in late.text
    finally:
        alice.close()
        bob.close()


def test_a_request_notification_names_the_groups_that_may_approve_it(site):
    small, big = site.start(SMALL), site.start(BIG)
    deadline = time.monotonic() + 30
    wanted = {small["thread_id"]: None, big["thread_id"]: None}
    while None in wanted.values() and time.monotonic() < deadline:
        for got in list(site.receiver.got):  # type: ignore[attr-defined]
            body = got.json
            if body["type"] == "approval.requested" and body["data"]["thread_id"] in wanted:
                wanted[body["data"]["thread_id"]] = body["data"].get("approver_groups")
        time.sleep(0.05)  # polls until both requests were notified (deadline above)
    assert wanted == {small["thread_id"]: ["support-leads"], big["thread_id"]: ["finance"]}


def test_the_delegation_page_and_the_decide_as_select_fit_a_phone(site, browser):
    delegate(site, "alice", "bob", days=3)
    run = site.start(SMALL)
    page = sign_in(browser, site, "bob")
    page.set_viewport_size({"width": 375, "height": 800})
    for path in ("/inbox/delegations", f"/inbox/requests/{run['thread_id']}"):
        page.goto(f"{site.url}{path}")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 375, (path, width)
    assert page.locator("#on_behalf_of option").all_inner_texts() == [
        "yourself (bob)",
        "bob for alice",
    ]
    page.goto(f"{site.url}/inbox/delegations")
    assert "alice" in page.inner_text("#received")
    page.context.close()


def test_group_names_are_matched_exactly_in_the_queue(store):
    """``_`` and ``%`` are wildcards to LIKE: a group named ``a_b`` must not match ``axb``."""
    from store.queue import Eligible, QueueFilter, queue_count

    for thread_id, groups in (("t-under", "|a_b|"), ("t-x", "|axb|"), ("t-pct", "|a%|")):
        store.db.execute(
            "INSERT INTO runs (thread_id, workflow, status, created_at, updated_at, expires_at, "
            "approver_groups) VALUES (:t, 'refund', 'waiting', 1, 1, 9e9, :g)",
            {"t": thread_id, "g": groups},
        )

    def waiting_on(*groups: str) -> int:
        who = (Eligible("bob", frozenset(groups)),)
        return queue_count(store.db, "bob", QueueFilter(waiting_on_me=True, principals=who))

    assert waiting_on("a_b") == 1
    assert waiting_on("a%") == 1
    assert waiting_on("a\\b", "zz") == 0
    assert waiting_on("axb", "a_b") == 2
