"""One decision path: the same decision, made through every source (the API, the web inbox, the
inbox command line, a signed webhook, the sweep polling an inbox), meets the same rules and gets
the same typed result: applied, pending with the same approvers, or each refusal reason.

Each source is driven the way it is in production: real HTTP to a real uvicorn (API key, session
and CSRF for the page, a Svix signature for the webhook), the CLI's source in-process and as a
process, the sweep's source from an inbox's answer. Every situation is set up anew per source.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from conftest import run_cli

from store.db import open_store
from testkit.databases import environment, fresh_database
from testkit.sources import (
    APPROVE,
    SOURCES,
    Site,
    edit_to,
    via_api,
    via_webhook,
)
from testkit.wait import past
from testkit.webapp import api_key, start_server, worker_env
from worker.refusals import Refusal
from worker.runner import Runner

POLICY = {"SEPARATION_OF_DUTIES": "1", "REFUND_QUORUM_AMOUNT": "500", "REFUND_QUORUM": "2"}
SMALL, BIG = "Refund order A-1002: it leaks", "Refund order A-1004: wobbly"  # 329.00, 540.00


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
    return via(site, run, edit_to(520.0), "bob")


def duties(site: Site, via) -> tuple:
    return via(site, site.start(SMALL, requester="mia"), APPROVE, "mia")


def invalid(site: Site, via) -> tuple:
    return via(site, site.start(SMALL), edit_to(-5.0, order="A-1002"), "bob")


def locked(site: Site, via) -> tuple:
    return via(site, site.start(SMALL), edit_to(10.0, order="A-1001"), "bob")


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
    assert "was already decided by carol through the API on " in proc.stderr, proc.stderr
    events = site.runner.runs.events(run["thread_id"])
    assert "late decision refused" not in [e.reason for e in events]
    assert len([e for e in events[before:] if e.reason == "decision claimed"]) == 1


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
