"""One decision path: the same decision, made through every source (the API, the web inbox, the
inbox command line, a signed webhook, the sweep polling an inbox), meets the same rules and gets
the same typed result: applied, pending with the same approvers, or each refusal reason.

Each source is driven the way it is in production: real HTTP to a real uvicorn (API key, session
and CSRF for the page, a Svix signature for the webhook), the CLI's source in-process and as a
process, the sweep's source from an inbox's answer. Every situation is set up anew per source.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from conftest import run_cli
from servers import LOCAL_SECRET, api_key, sign, start_server, worker_env

from inbox.base import Approval
from store.db import open_store
from testkit.databases import environment, fresh_database
from testkit.tables import reset_books
from testkit.wait import past
from worker.cli import answer_request
from worker.decisions import Applied, Pending
from worker.refusals import Refusal, Refused
from worker.runner import Runner

POLICY = {"SEPARATION_OF_DUTIES": "1", "REFUND_QUORUM_AMOUNT": "500", "REFUND_QUORUM": "2"}
SMALL, BIG = "Refund order A-1002: it leaks", "Refund order A-1004: wobbly"  # 329.00, 540.00


@dataclass
class Site:
    url: str
    runner: Runner
    keys: dict[str, dict[str, str]]
    counter: int = 0

    def settle(self, timeout: float = 30) -> None:
        """Wait until no run is being resumed in the server (a hand-off waits for a sweep)."""
        deadline = time.monotonic() + timeout
        busy = (
            "SELECT count(*) AS n FROM runs WHERE status IN ('running', 'resuming') "
            "AND owner NOT LIKE 'handoff:%'"
        )
        while self.runner.store.db.one(busy)["n"] and time.monotonic() < deadline:
            time.sleep(0.05)  # polls until no resume is in flight (deadline above)

    def start(self, text: str, requester: str = "rita", expires_in: str | None = None) -> dict:
        # the module's runs share the five demo orders: the books start again before each one
        # (and again if an earlier run's resume refunded the order meanwhile: nothing to propose)
        for _ in range(5):
            self.counter += 1
            self.settle()  # earlier resumes finish before the books start again
            reset_books(self.runner.store.db)
            body: dict = {"input": text, "thread_id": f"t-path-{self.counter}"}
            if expires_in:
                body["expires_in"] = expires_in
            reply = httpx.post(
                f"{self.url}/runs", json=body, headers=self.keys[requester], timeout=30
            )
            assert reply.status_code == 201, reply.text
            if "approval" in reply.json() or "A-1" not in text:
                break
        return reply.json()


@pytest.fixture(scope="module")
def site(tmp_path_factory, postgres_url) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("decision-path")
    with fresh_database("postgres", tmp, postgres_url) as db_env:
        server = start_server(worker_env(db_env, **POLICY), tmp / "uvicorn.log")
        keys = {
            "rita": api_key(db_env, "rita", "requester"),
            "mia": api_key(db_env, "mia", "requester", "reviewer"),
            "bob": api_key(db_env, "bob", "reviewer"),
            "carol": api_key(db_env, "carol", "reviewer"),
        }
        with environment({**db_env, **POLICY}), open_store() as store:
            yield Site(server.url, Runner(store), keys)
        server.stop()


# -- each source, reduced to the typed result it got -------------------------------------------


def _typed(kind: str, detail: object = None) -> tuple:
    return (kind, detail)


def _code(code: str) -> tuple:
    return _typed("refused", Refusal[code.upper()])


def via_api(site: Site, run: dict, decisions: list[dict], who: str, **override: str) -> tuple:
    body = {
        "interrupt_id": run["approval"]["interrupt_id"],
        "digest": run["approval"]["digest"],
        "decisions": decisions,
        **override,
    }
    reply = httpx.post(
        f"{site.url}/runs/{run['thread_id']}/decision",
        json=body,
        headers=site.keys[who],
        timeout=30,
    )
    if reply.status_code >= 400:
        return _code(reply.json()["error"]["code"])
    answer = reply.json()
    if answer["status"] == "approval recorded":
        return _typed("pending", answer["approvers"])
    return _typed("applied")


def _page_session(site: Site, who: str) -> httpx.Client:
    client = httpx.Client(base_url=site.url, follow_redirects=False, timeout=30)
    page = client.get("/inbox/login")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    credential = site.keys[who]["authorization"].removeprefix("Bearer ")
    signed_in = client.post(
        "/inbox/login", data={"csrf": token, "next": "/inbox", "credential": credential}
    )
    assert signed_in.status_code == 303, signed_in.text
    return client


def via_page(site: Site, run: dict, decisions: list[dict], who: str, **override: str) -> tuple:
    client = _page_session(site, who)
    try:
        page = client.get(f"/inbox/requests/{run['thread_id']}").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        form = {
            "csrf": csrf,
            "interrupt_id": override.get("interrupt_id", run["approval"]["interrupt_id"]),
            "digest": override.get("digest", run["approval"]["digest"]),
        }
        for i, decision in enumerate(decisions):
            form[f"d{i}"] = decision["type"]
            if decision["type"] == "edit":
                for name, value in decision["edited_action"]["args"].items():
                    form[f"a{i}.{name}"] = str(value)
            if decision.get("message"):
                form[f"reason{i}"] = decision["message"]
        reply = client.post(f"/inbox/requests/{run['thread_id']}/decide", data=form)
    finally:
        client.close()
    reason = re.search(r'data-reason="([^"]*)"', reply.text)
    if reply.status_code == 422 and 'class="outcome invalid"' in reply.text:
        return _code("invalid")  # a field the form itself refused
    if reason and reason.group(1):
        return _code(reason.group(1))
    if reply.status_code == 404:
        return _code("unknown_run")
    if 'class="outcome pending"' in reply.text:
        names = re.search(r"approvers \(([^)]*)\)", reply.text).group(1)
        return _typed("pending", names.split(", "))
    assert 'class="outcome applied"' in reply.text, reply.text[:2000]
    return _typed("applied")


def via_cli(site: Site, run: dict, decisions: list[dict], who: str, **override: str) -> tuple:
    request_id = override.get("interrupt_id", run["approval"]["interrupt_id"])
    try:
        result = answer_request(site.runner, request_id, lambda _: decisions, who)
    except Refused as exc:  # an unknown request id names no run
        result = exc
    return _result(result)


def via_webhook(site: Site, run: dict, decisions: list[dict], who: str, **override: str) -> tuple:
    items = []
    for decision in decisions:
        item = {"name": "issue_refund", "decision": decision["type"], "decidedByName": who}
        if decision["type"] == "edit":
            item["editedArgs"] = decision["edited_action"]["args"]
        if "message" in decision:
            item["responseText"] = decision["message"]
        items.append(item)
    body = json.dumps(
        {
            "type": "interrupt.answered",
            "data": {
                "id": override.get("interrupt_id", run["approval"]["interrupt_id"]),
                "externalId": f"approval-worker:{run['thread_id']}",
                "actionRequests": items,
            },
        }
    )
    site.counter += 1
    headers = sign(body, secret=LOCAL_SECRET, msg_id=f"msg_path_{site.counter}")
    reply = httpx.post(f"{site.url}/webhooks/local", content=body, headers=headers, timeout=30)
    answer = reply.json()
    if reply.status_code == 202:
        return _typed("applied")
    if answer["status"] == "approval recorded":
        return _typed("pending", answer["approvers"])
    return _code(answer["code"])


def via_sweep(site: Site, run: dict, decisions: list[dict], who: str, **override: str) -> tuple:
    """What the sweep makes of an inbox's answer (an external inbox, polled)."""
    answered = Approval(
        id=override.get("interrupt_id", run["approval"]["interrupt_id"]),
        external_id=f"approval-worker:{run['thread_id']}",
        title="",
        description="",
        request={},
        args_schemas={},
        status="answered",
        decisions=decisions,
        created_at=time.time(),
        answered_at=time.time(),
        approvers=[who],
    )
    decision = site.runner.sweeper.decision_of(run["thread_id"], answered)
    result = site.runner.decide(decision)
    if isinstance(result, Applied):  # as the sweep does: it resumes what it claimed
        site.runner.resume_claimed(result.run)
    return _result(result)


def _result(result: Applied | Pending | Refused) -> tuple:
    if isinstance(result, Refused):
        return _typed("refused", result.reason)
    if isinstance(result, Pending):
        return _typed("pending", result.approvers)
    return _typed("applied")


SOURCES: dict[str, Callable[..., tuple]] = {
    "api": via_api,
    "page": via_page,
    "cli": via_cli,
    "webhook": via_webhook,
    "sweep": via_sweep,
}
APPROVE = [{"type": "approve"}]


def _edit(amount: float, order: str = "A-1004") -> list[dict]:
    args = {"order_id": order, "amount": amount, "reason": "partial"}
    return [{"type": "edit", "edited_action": {"name": "issue_refund", "args": args}}]


# -- situations: (setup -> the run, then the decision) and the one expected result -------------


def applied(site: Site, via) -> tuple:
    return via(site, site.start(SMALL), APPROVE, "bob")


def pending(site: Site, via) -> tuple:
    return via(site, site.start(BIG), APPROVE, "bob")


def quorum_met(site: Site, via) -> tuple:
    run = site.start(BIG)
    assert via_api(site, run, APPROVE, "carol") == ("pending", ["carol"])
    return via(site, run, APPROVE, "bob")


def repeated(site: Site, via) -> tuple:
    run = site.start(BIG)
    assert via_api(site, run, APPROVE, "bob") == ("pending", ["bob"])
    return via(site, run, APPROVE, "bob")


def disagree(site: Site, via) -> tuple:
    run = site.start(BIG)
    assert via_api(site, run, APPROVE, "carol") == ("pending", ["carol"])
    return via(site, run, _edit(520.0), "bob")


def duties(site: Site, via) -> tuple:
    return via(site, site.start(SMALL, requester="mia"), APPROVE, "mia")


def invalid(site: Site, via) -> tuple:
    return via(site, site.start(SMALL), _edit(-5.0, order="A-1002"), "bob")


def locked(site: Site, via) -> tuple:
    return via(site, site.start(SMALL), _edit(10.0, order="A-1001"), "bob")


def decided(site: Site, via) -> tuple:
    run = site.start(SMALL)
    assert via_api(site, run, APPROVE, "carol") == ("applied", None)
    return via(site, run, APPROVE, "bob")


def cancelled(site: Site, via) -> tuple:
    run = site.start(SMALL)
    site.runner.cancel(run["thread_id"], "withdrawn")
    return via(site, run, APPROVE, "bob")


def expired(site: Site, via) -> tuple:
    run = site.start(SMALL, expires_in="1s")
    past(time.time() + 1.1, "the one-second deadline, judged by the server's clock")
    return via(site, run, APPROVE, "bob")


def other_interrupt(site: Site, via) -> tuple:
    run = site.start(SMALL)
    return via(site, run, APPROVE, "bob", interrupt_id="0" * 32)


def stale(site: Site, via) -> tuple:
    return via(site, site.start(SMALL), APPROVE, "bob", digest="0" * 32)


SITUATIONS = {
    applied: ("applied", None),
    pending: ("pending", ["bob"]),
    quorum_met: ("applied", None),
    repeated: ("refused", Refusal.REPEATED),
    disagree: ("refused", Refusal.DISAGREE),
    duties: ("refused", Refusal.DUTIES),
    invalid: ("refused", Refusal.INVALID),
    decided: ("refused", Refusal.DECIDED),
    cancelled: ("refused", Refusal.NOT_WAITING),
    expired: ("refused", Refusal.EXPIRED),
}
# Only a source that names the request by something besides its id can name a wrong one: the
# CLI finds the run by the request's id; only the API and the page carry the digest seen.
ONLY = {
    other_interrupt: (("refused", Refusal.OTHER_INTERRUPT), ("api", "page", "webhook", "sweep")),
    stale: (("refused", Refusal.STALE), ("api", "page")),
    # the page shows a locked argument read-only and sends the value it was proposed with
    locked: (("refused", Refusal.INVALID), ("api", "cli", "webhook", "sweep")),
}


@pytest.mark.parametrize("situation", list(SITUATIONS), ids=lambda f: f.__name__)
def test_every_source_gets_the_same_result_for_the_same_situation(site, situation):
    got = {name: situation(site, via) for name, via in SOURCES.items()}
    assert got == {name: SITUATIONS[situation] for name in SOURCES}


@pytest.mark.parametrize("situation", list(ONLY), ids=lambda f: f.__name__)
def test_a_wrong_request_is_refused_by_every_source_that_can_name_one(site, situation):
    expected, sources = ONLY[situation]
    assert {name: situation(site, SOURCES[name]) for name in sources} == dict.fromkeys(
        sources, expected
    )


def test_a_run_decided_through_the_api_is_closed_in_every_view(site):
    run = site.start(SMALL)
    request_id = run["approval"]["interrupt_id"]
    before = len(site.runner.runs.events(run["thread_id"]))
    assert via_api(site, run, APPROVE, "carol") == ("applied", None)
    # the local inbox's copy closed with the claim: the CLI's list and show, the pages
    assert site.runner.inbox.get(request_id).status == "answered"
    assert request_id not in [a.id for a in site.runner.inbox.pending()]
    listed = run_cli("inbox", "list")
    assert request_id not in listed.stdout
    # answering it on the command line says who decided it and through what, and records nothing
    proc = run_cli("inbox", "approve", request_id, "--by", "bob", check_rc=2)
    assert "was already decided (through the API, by carol at " in proc.stderr, proc.stderr
    events = site.runner.runs.events(run["thread_id"])
    assert "late decision refused" not in [e["reason"] for e in events]
    assert len([e for e in events[before:] if e["reason"] == "decision claimed"]) == 1


def test_a_webhook_decision_closes_the_local_inbox_copy(site):
    run = site.start(SMALL)
    assert via_webhook(site, run, APPROVE, "bob") == ("applied", None)
    request = site.runner.inbox.get(run["approval"]["interrupt_id"])
    assert request.status == "answered" and request.approvers == ["bob"]
    assert run["approval"]["interrupt_id"] not in [a.id for a in site.runner.inbox.pending()]


def test_a_refusal_changes_no_table(site):
    run = site.start(SMALL, requester="mia")
    before = site.runner.runs.events(run["thread_id"])
    for name, via in SOURCES.items():
        assert via(site, run, APPROVE, "mia") == ("refused", Refusal.DUTIES), name
    assert site.runner.runs.events(run["thread_id"]) == before
    assert site.runner.approvals.list(run["thread_id"], run["approval"]["interrupt_id"]) == []
