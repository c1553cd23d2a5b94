"""Vigilator as the inbox: the real client against a local server speaking Vigilator's API.

The webhook app runs under uvicorn with ``INBOX=vigilator``; the fake (testkit/fake_vigilator.py)
plays Vigilator and its reviewers, sending Svix-signed events to the app.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest
from conftest import ENV_NAMES, ROOT, fresh_database

from agent.ledger import Ledger
from core.errors import UserError
from core.hitl import HitlRequest
from inbox import open_inbox
from inbox.vigilator import VigilatorError, VigilatorInbox
from inbox.vigilator.client import Client, Settings
from store.db import open_store
from testkit import zygote
from testkit.fake_vigilator import API_KEY, FakeVigilator
from testkit.vigilator_seed import seed_waiting_runs
from testkit.webapp import SECRET, Server, free_port, start_server, wait_for_status, worker_env
from worker.runner import Runner
from worker.workflows import get_workflow

# A read is given all the time it needs: a short module-wide timeout let a loaded CI machine
# (the fake shares this process's GIL) time out a request the fake had answered, and the retry
# met no fault (CI on 54715d8: a 404 that was to be refused was retried and answered 2xx). The
# tests of a timeout set a short one themselves (TIMING_OUT).
FAST = {"VIGILATOR_TIMEOUT": "60", "VIGILATOR_RETRY_BASE_SECONDS": "0.01"}
TIMING_OUT = "0.5"  # the timeout of the tests of one; the fake answers those 1.5 s late


def vigilator_env(fake: FakeVigilator, **extra: str) -> dict[str, str]:
    return {
        "INBOX": "vigilator",
        "VIGILATOR_API_KEY": API_KEY,
        "VIGILATOR_BASE_URL": fake.url,
        **FAST,
        **extra,
    }


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return zygote.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)


# -- the app, the fake, and a runner on the same database -----------------------------------


@dataclass
class Setup:
    fake: FakeVigilator
    server: Server
    env: dict[str, str]  # for subprocesses: the app's database, INBOX=vigilator
    db_env: dict[str, str]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def vig(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"vigilator-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    port = free_port()
    fake = FakeVigilator(
        webhook_url=f"http://127.0.0.1:{port}/webhooks/vigilator", webhook_secret=SECRET
    ).start()
    with fresh_database(request.param, tmp, pg) as db_env:
        env = worker_env(db_env, **vigilator_env(fake))
        server = start_server(env, tmp / "uvicorn.log", port=port)
        yield Setup(fake, server, env, db_env)
        server.stop()
    fake.stop()


@pytest.fixture
def vrunner(vig, monkeypatch, tmp_path):
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    for name, value in {**vig.db_env, **vigilator_env(vig.fake)}.items():
        monkeypatch.setenv(name, value)
    with open_store() as store:
        Ledger(store.db).clear()  # the module's tests share a database and its five orders
        yield Runner(store)


def test_full_loop_by_webhook(vig, vrunner):
    fake, seen = vig.fake, len(vig.fake.stats.requests)
    outcome = vrunner.start("Refund order A-1001: arrived broken", thread_id="t-vig-hook")
    assert outcome.status == "waiting"
    [record] = fake.by_external_id("approval-worker:t-vig-hook")
    assert record["id"] == outcome.interrupt_id
    assert record["title"].startswith("Approve issue_refund(") and len(record["title"]) <= 100
    [action] = record["actionRequests"]
    assert action["name"] == "issue_refund"
    assert action["args"] == {"order_id": "A-1001", "amount": "49.90", "reason": "arrived broken"}
    assert action["allowedDecisions"] == ["approve", "edit", "reject"]
    assert action["argsSchema"] == get_workflow("refund").args_schemas()["issue_refund"]
    assert [m["type"] for m in record["messages"]] == ["human", "ai", "tool", "ai"]
    assert record["messages"][-1]["toolCalls"][0]["name"] == "issue_refund"
    assert set(fake.stats.keys[seen:]) == {API_KEY}

    response = fake.answer(outcome.interrupt_id, by="carol")
    assert response.status_code == 202, response.text
    view = wait_for_status(vig.server.url, "t-vig-hook", "done")
    assert view["result"].startswith("Refunded 49.90 EUR for order A-1001")
    claim = [e for e in vrunner.runs.events("t-vig-hook") if e.reason == "decision claimed"]
    assert claim[0].detail["approvers"] == ["carol"]

    redelivered = fake.send(fake.sent[-1])  # Svix may deliver twice
    assert redelivered.status_code == 200 and redelivered.json()["status"] == "ignored"
    assert len(Ledger(vrunner.store.db).refunds("t-vig-hook")) == 1


def test_polling_resumes_when_the_webhook_is_lost_and_list_shows_escalations(vig, vrunner):
    fake = vig.fake
    outcome = vrunner.start("Refund order A-1002: leaks", thread_id="t-vig-poll")
    assert fake.escalate(outcome.interrupt_id).json() == {
        "status": "recorded",
        "type": "interrupt.escalated",
    }
    listed = cli(vig.env, str(ROOT / "recover.py"), "--list")
    assert listed.returncode == 0, listed.stderr
    [line] = [x for x in listed.stdout.splitlines() if x.startswith("t-vig-poll ")]
    assert re.fullmatch(
        rf"t-vig-poll  waiting on {outcome.interrupt_id}  \(\d+s\)  escalated \(\d+s ago\)", line
    ), line

    reject = {"decision": "reject", "responseText": "duplicate claim"}
    fake.answer(outcome.interrupt_id, [reject], deliver=False)  # the webhook never arrives
    assert vrunner.runs.get("t-vig-poll").status == "waiting"
    swept = cli(vig.env, str(ROOT / "recover.py"))
    assert swept.returncode == 0, swept.stderr
    # the sweep's claim is queued like any other: the sweep resumes it, unless the app's own
    # resumer (woken by the claim's NOTIFY) took it first, which the sweep then says
    declined = "t-vig-poll  The refund was declined by the reviewer: duplicate claim"
    taken = "t-vig-poll  taken by a running resumer"
    assert declined in swept.stdout or taken in swept.stdout, swept.stdout
    view = wait_for_status(vig.server.url, "t-vig-poll", "done")
    assert view["result"] == "The refund was declined by the reviewer: duplicate claim", view
    assert Ledger(vrunner.store.db).refunds("t-vig-poll") == []


def test_cancel_and_expiry_with_vigilator_record_that_the_interrupt_stays_open(vig, vrunner):
    """Vigilator's API cannot close an interrupt: the run still ends, the trail says the
    request stayed open there, and a later answer from Vigilator changes nothing."""
    cancelled = vrunner.start("Refund order A-1001: broken", thread_id="t-vig-cancel")
    result = vrunner.cancel("t-vig-cancel", "customer withdrew")
    assert result == "Cancelled (customer withdrew); nothing was done."
    assert vrunner.runs.get("t-vig-cancel").status == "cancelled"

    clock = [time.time()]
    expiring = Runner(vrunner.store, vrunner.inbox, clock=lambda: clock[0])
    paused = expiring.start("Refund order A-1002: leaks", thread_id="t-vig-expire", expires_in="1h")
    expiring.start("Refund order A-1005: late", thread_id="t-vig-other", expires_in="1h")
    clock[0] += 2 * 3600
    swept = expiring.sweep()  # both overdue: one sweep expires both, neither aborts it
    assert {o.thread_id for o in swept if o.status == "expired"} >= {"t-vig-expire", "t-vig-other"}
    for thread_id in ("t-vig-cancel", "t-vig-expire"):
        reasons = [e.reason for e in vrunner.runs.events(thread_id)]
        assert "inbox request left open" in reasons, reasons
    late = vig.fake.answer(paused.interrupt_id, by="carol")
    assert late.status_code == 200 and late.json()["status"] == "ignored"
    answered = vig.fake.answer(cancelled.interrupt_id, by="carol")
    assert answered.status_code == 200 and answered.json()["status"] == "ignored"
    assert Ledger(vrunner.store.db).refunds("t-vig-expire") == []


# -- creating exactly one interrupt per pause -----------------------------------------------


@pytest.fixture
def fake(backend, monkeypatch):
    with FakeVigilator() as server:
        for name, value in vigilator_env(server).items():
            monkeypatch.setenv(name, value)
        yield server


def open_args(thread_id: str, amount: float = 10.0) -> dict:
    args = {"order_id": "A-1001", "amount": amount, "reason": "broken"}
    return {
        "external_id": f"approval-worker:{thread_id}",
        "dedupe_key": f"{thread_id}:0123abcd",
        "title": f"Approve issue_refund({amount})",
        "description": "x" * 5000,  # longer than Vigilator takes: truncated, not refused
        "request": HitlRequest.parse(
            {
                "action_requests": [
                    {"name": "issue_refund", "args": args, "description": "Refund"}
                ],
                "review_configs": [
                    {"action_name": "issue_refund", "allowed_decisions": ["approve", "reject"]}
                ],
            }
        ),
        "args_schemas": {"issue_refund": {"type": "object"}},
    }


def local_rows(store) -> list[tuple]:
    rows = store.db.all("SELECT dedupe_key, interrupt_id FROM vigilator_requests ORDER BY 1")
    return [(r["dedupe_key"], r["interrupt_id"]) for r in rows]


@pytest.mark.parametrize("failure", ["answers too late", "drops the connection"])
def test_a_create_retried_after_a_timeout_leaves_one_interrupt(fake, store, failure, monkeypatch):
    if failure == "answers too late":
        monkeypatch.setenv("VIGILATOR_TIMEOUT", TIMING_OUT)
        fake.late_next(1.5)  # the client gives up after TIMING_OUT
    else:
        fake.drop_next()
    inbox = VigilatorInbox(store.tables)
    interrupt_id = inbox.open(**open_args("t-once"))
    [record] = fake.by_external_id("approval-worker:t-once")
    assert record["id"] == interrupt_id
    assert len(record["description"]) == 2000
    assert fake.stats.count("POST") == 1  # found by externalId, not sent again
    assert local_rows(store) == [("t-once:0123abcd", interrupt_id)]

    requests = len(fake.stats.requests)
    assert inbox.open(**open_args("t-once")) == interrupt_id  # a retried segment
    assert len(fake.stats.requests) == requests  # answered from our table, no HTTP at all


def test_a_later_pause_proposing_the_same_action_gets_its_own_interrupt(fake, store, monkeypatch):
    inbox = VigilatorInbox(store.tables)
    first = inbox.open(**open_args("t-two"))
    monkeypatch.setenv("VIGILATOR_TIMEOUT", TIMING_OUT)
    inbox = VigilatorInbox(store.tables)  # its client times out after TIMING_OUT
    fake.late_next(1.5)  # the reconciling lookup sees both: the first is ours already
    second = inbox.open(**{**open_args("t-two"), "dedupe_key": "t-two:4567ef01"})
    assert first != second
    assert [r["id"] for r in fake.by_external_id("approval-worker:t-two")] == [first, second]
    assert fake.stats.count("POST") == 2


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_process_killed_after_the_create_landed_does_not_create_twice(fake, store):
    script = (
        "import json, os; from store.db import open_store; "
        "from core.hitl import HitlRequest; from inbox.vigilator import VigilatorInbox\n"
        "a = json.loads(os.environ['ARGS']); a['request'] = HitlRequest.parse(a['request'])\n"
        "with open_store() as s: VigilatorInbox(s.tables).open(**a)"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "FAULTS": "vigilator.created=kill",
        "VIGILATOR_TIMEOUT": "0.2",  # its send lease, which the next open() waits out: 1.6 s
        "ARGS": json.dumps({**(a := open_args("t-crash")), "request": a["request"].to_json()}),
    }
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr  # killed between Vigilator's answer and our record
    [record] = fake.by_external_id("approval-worker:t-crash")
    assert local_rows(store) == [("t-crash:0123abcd", None)]  # recorded before sending

    assert VigilatorInbox(store.tables).open(**open_args("t-crash")) == record["id"]
    assert fake.stats.count("POST") == 1
    assert local_rows(store) == [("t-crash:0123abcd", record["id"])]


# -- errors and retries ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (402, "USAGE_LIMIT_REACHED", "Vigilator quota or plan limit reached (402 USAGE_LIMIT"),
        (403, "ORGANISATION_LIMIT_REACHED", "Vigilator refused POST api/interrupts (403 ORGAN"),
        (404, "NOT_FOUND", "Vigilator has nothing at POST api/interrupts (404 NOT_FOUND"),
    ],
)
def test_api_errors_become_one_line_messages(fake, store, status, code, expected):
    # A server that echoes the key back must not get it into our message.
    fake.fail_next(status, code=code, message=f"no.\nyour key {API_KEY} is out", method="POST")
    with pytest.raises(VigilatorError) as info:
        VigilatorInbox(store.tables).open(**open_args("t-err"))
    text = str(info.value)
    assert text.startswith(expected), text
    assert "\n" not in text and API_KEY not in text and "***" in text
    assert info.value.fatal and isinstance(info.value, UserError)
    assert fake.stats.count("POST") == 1  # not retried
    assert local_rows(store) == [("t-err:0123abcd", None)]  # a later open() tries again
    if status == 404:
        assert f"VIGILATOR_BASE_URL={fake.url}" in text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_wrong_key_and_a_missing_key(fake, store, monkeypatch):
    monkeypatch.setenv("VIGILATOR_API_KEY", "vk_wrong")
    with pytest.raises(VigilatorError) as info:
        VigilatorInbox(store.tables).open(**open_args("t-key"))
    assert str(info.value).startswith("Vigilator rejected VIGILATOR_API_KEY (401 UNAUTHORIZED")
    assert "vk_wrong" not in str(info.value)
    assert fake.interrupts == {}

    monkeypatch.delenv("VIGILATOR_API_KEY")
    with pytest.raises(UserError, match=r"^INBOX=vigilator needs VIGILATOR_API_KEY"):
        open_inbox(store.tables)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_transient_errors_are_retried_and_succeed(fake, store, monkeypatch):
    monkeypatch.setenv("VIGILATOR_RETRIES", "3")
    waits: list[float] = []  # what the client asked to sleep before each retry, not slept
    client = Client(Settings.from_env(), sleep=waits.append)
    inbox = VigilatorInbox(store.tables, client=client)
    fake.fail_next(503, method="POST", times=2)
    interrupt_id = inbox.open(**open_args("t-flaky"))
    assert fake.stats.count("POST") == 3
    # a 503 might hide a create that landed: each retry looked first, and found none
    assert fake.stats.requests.count(("GET", "/api/interrupts")) == 2
    assert [r["id"] for r in fake.by_external_id("approval-worker:t-flaky")] == [interrupt_id]

    fake.fail_next(429, method="GET", retry_after="0.3")
    fake.fail_next(502, method="GET")
    waits.clear()
    approval = inbox.get(interrupt_id)
    assert len(waits) == 2 and waits[0] == 0.3  # Retry-After honoured, then the backoff
    assert approval.status == "pending" and approval.id == interrupt_id
    assert inbox.get("0b8a0c1e-0000-4000-8000-000000000000") is None  # unknown id: not an error

    fake.fail_next(503, method="GET", times=10)
    with pytest.raises(VigilatorError) as info:
        inbox.get(interrupt_id)
    assert re.fullmatch(
        rf"Vigilator at {re.escape(fake.url)} did not answer GET api/interrupts/\S+ after "
        r"4 attempt\(s\) \(last: HTTP 503\); try again later",
        str(info.value),
    ), info.value


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_rejected_key_stops_the_sweep_with_one_line(fake, store):
    seed_waiting_runs(store.db, fake, 100)
    bad_key = "vk_live_not-the-right-one"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VIGILATOR_API_KEY": bad_key}
    env["VIGILATOR_CONCURRENCY"] = "2"
    proc = cli(env, str(ROOT / "recover.py"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: Vigilator rejected VIGILATOR_API_KEY (401 UNAUTHORIZED")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert bad_key not in proc.stderr and API_KEY not in proc.stderr
    assert fake.stats.count("GET") < 20  # the first 401 stopped the sweep: not 100 of them


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_nothing_listening_is_retried_then_one_line(store, monkeypatch):
    monkeypatch.setenv("VIGILATOR_API_KEY", API_KEY)
    monkeypatch.setenv("VIGILATOR_BASE_URL", f"http://127.0.0.1:{free_port()}/")
    monkeypatch.setenv("VIGILATOR_RETRIES", "2")
    monkeypatch.setenv("VIGILATOR_RETRY_BASE_SECONDS", "0.01")
    with pytest.raises(VigilatorError, match=r"after 3 attempt\(s\) \(last: ConnectError"):
        VigilatorInbox(store.tables).open(**open_args("t-down"))


# -- a sweep reads in parallel, within the bound --------------------------------------------


def test_a_sweep_over_a_thousand_waiting_runs_reads_in_parallel(fake, store, monkeypatch):
    monkeypatch.setenv("VIGILATOR_CONCURRENCY", "8")
    runner = Runner(store)
    seed_waiting_runs(store.db, fake, 1000)
    real = runner.start("Refund order A-1004: wrong colour", thread_id="t-sweep-real")
    edit = {"order_id": "A-1004", "amount": 12.0, "reason": "partial"}
    fake.answer(real.interrupt_id, [{"decision": "edit", "editedArgs": edit}], deliver=False)
    fake.delay = 0.005
    seen_before = len(fake.stats.requests)

    outcomes = runner.sweep()

    assert [(o.thread_id, o.status) for o in outcomes] == [("t-sweep-real", "done")]
    assert outcomes[0].result.startswith("Refunded 12.00 EUR for order A-1004")
    reads = [p for m, p in fake.stats.requests[seen_before:] if m == "GET"]
    reads = [p for p in reads if p.startswith("/api/interrupts/")]
    assert len(reads) == len(set(reads)) == 1001  # every waiting run's interrupt, read once
    assert 1 < fake.stats.max_in_flight <= 8


# -- small pieces ---------------------------------------------------------------------------


def test_the_interrupt_body_stays_within_vigilators_limits():
    from inbox.vigilator import interrupt_body

    args = open_args("t-body")
    body = interrupt_body(
        **{k: args[k] for k in ("external_id", "request", "args_schemas")},
        title=" ",
        description="",
        conversation=[{"role": "system", "text": "hidden"}, {"role": "user", "text": "hi"}],
    )
    assert body["title"] == "Approve issue_refund"  # Vigilator wants 2-100 characters
    assert body["description"] == body["title"]
    assert body["messages"] == [{"type": "human", "content": "hi"}]
    too_many = {"action_requests": [{"name": "issue_refund", "args": {}}] * 51}
    with pytest.raises(UserError, match="1 to 50 actions per interrupt; this pause proposes 51"):
        interrupt_body(
            external_id="a:b", title="Approve", description="many",
            request=HitlRequest.parse(too_many), args_schemas={},
        )  # fmt: skip


def test_list_shows_only_escalations_of_the_approval_a_run_waits_on(runner):
    from store.runs import RunStore
    from store.states import Event

    ESCALATED = Event.ESCALATION_RECEIVED

    outcome = runner.start("Refund order A-1001: broken", thread_id="t-esc")
    waiting_since = runner.runs.get("t-esc").updated_at
    earlier = RunStore(runner.store.db, clock=lambda: waiting_since - 60)
    earlier.record("t-esc", "webhook:vigilator", ESCALATED)  # of an earlier pause
    assert [(r.thread_id, r.escalations) for r in runner.runs.waiting_with_escalations()] == [
        ("t-esc", 0)
    ]
    for _ in range(2):
        runner.runs.record("t-esc", "webhook:vigilator", ESCALATED, {"id": outcome.interrupt_id})
    [row] = runner.runs.waiting_with_escalations()
    assert row.escalations == 2 and row.escalated_at is not None
    assert row.escalated_at >= waiting_since
