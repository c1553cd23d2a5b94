"""The stop button (issue 35): a halt of a tool, a workflow or everything refuses new runs and
decisions ("halted", a 4xx, nothing written), stops a run mid-resume before its side effect and
parks it; unhalt hands it back to the sweep, which finishes it exactly once. Halts live in the
database (another process sees them), and every halt and unhalt is an audit event with who and
why. In process with an injected clock; the API and page over real HTTP."""

from __future__ import annotations

import os

import httpx
import pytest

from agent.ledger import Ledger
from api.app import create_app
from store import halts
from store.keys import KeyStore, parse_groups, parse_roles
from store.verify import Verified, verify
from testkit import loopback
from testkit.clock import runner_at, waiting
from testkit.decide import claim
from testkit.servers import LOCAL_SECRET, serve_app
from testkit.tables import tables
from worker.decisions import Applied
from worker.halting import halt, unhalt
from worker.outcome import Note
from worker.refusals import Refusal, Refused

APPROVE = {"decisions": [{"type": "approve"}]}


def snapshot(db) -> list:
    return [
        db.all("SELECT * FROM runs ORDER BY thread_id"),
        db.all("SELECT * FROM run_events ORDER BY id"),
        db.all("SELECT * FROM run_approvals"),
        db.all("SELECT * FROM refunds"),
        db.all("SELECT * FROM webhook_deliveries"),
    ]


def test_a_tool_halt_refuses_decisions_and_unhalt_lets_them_through(store, clock):
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-halt-wait")
    halt(store, "cli:olga", "refund fraud wave", tool="issue_refund", now=clock())
    before = snapshot(store.db)
    refused = claim(runner, "t-halt-wait", outcome.interrupt_id, APPROVE)
    assert isinstance(refused, Refused) and refused.reason == Refusal.HALTED
    assert "tool issue_refund halted by cli:olga: refund fraud wave" in refused.message
    assert snapshot(store.db) == before  # the refusal wrote nothing
    assert unhalt(store, "cli:olga", "wave over", tool="issue_refund", now=clock()) == 0
    applied = claim(runner, "t-halt-wait", outcome.interrupt_id, APPROVE)
    assert isinstance(applied, Applied)
    assert runner.resume_claimed(applied.run).status == "done"
    assert len(Ledger(store.db).refunds("t-halt-wait")) == 1
    trail = runner.runs.events(halts.HALTS_CHAIN)
    assert [(e.reason, e.actor) for e in trail] == [
        ("halted", "cli:olga"),
        ("unhalted", "cli:olga"),
    ]
    assert [e.detail["reason"] for e in trail] == ["refund fraud wave", "wave over"]
    assert isinstance(verify(store.db), Verified)  # the halts' chain verifies like a run's


def test_a_workflow_halt_refuses_new_runs(store, clock):
    runner = runner_at(store, clock)
    halt(store, "api:ada", "model misbehaving", workflow="refund", now=clock())
    before = snapshot(store.db)
    with pytest.raises(Refused, match="halted: workflow refund halted by api:ada"):
        runner.start("Refund order A-1004: desk wobbles", thread_id="t-new")
    assert snapshot(store.db) == before
    unhalt(store, "api:ada", "fixed", workflow="refund", now=clock())
    assert runner.start("Refund order A-1004: desk wobbles", thread_id="t-new").status == "waiting"


def test_a_run_mid_resume_stops_before_its_side_effect_and_resumes_once(store, clock):
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-halt-mid")
    applied = claim(runner, "t-halt-mid", outcome.interrupt_id, APPROVE)
    assert isinstance(applied, Applied)
    halt(store, "cli:olga", "stop refunds", tool="issue_refund", now=clock())  # claimed first
    stopped = runner.resume_claimed(applied.run)
    assert stopped.note == Note.HALTED and "stop refunds" in stopped.line()
    assert Ledger(store.db).refunds("t-halt-mid") == []
    run = runner.runs.get("t-halt-mid")
    assert run.status == "resuming" and run.owner == "halted:tool:issue_refund"
    assert runner.runs.events("t-halt-mid")[-1].reason == "stopped by a halt"
    clock.now += 86400  # a day later: no sweep takes a parked run over
    assert runner.recovery_pass() == [] and Ledger(store.db).refunds("t-halt-mid") == []
    assert unhalt(store, "cli:olga", "cleared", tool="issue_refund", now=clock()) == 1
    [resumed] = runner.recovery_pass()
    assert resumed.status == "done"
    assert len(Ledger(store.db).refunds("t-halt-mid")) == 1
    assert runner.recovery_pass() == [] and len(Ledger(store.db).refunds("t-halt-mid")) == 1


@pytest.mark.parametrize("scope", [{"workflow": "refund"}, {"everything": True}])
def test_a_halt_during_a_step_parks_the_run_at_the_next_node_boundary(
    store, clock, monkeypatch, scope
):
    """A halt of the run's workflow or of everything, set while a step runs, stops the run
    before its next step even when that step has no side effect to gate: the segment reads the
    cancel intent and the halts at every node boundary, in one read."""
    from store.receipts import Receipts

    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-halt-step")
    applied = claim(runner, "t-halt-step", outcome.interrupt_id, APPROVE)
    assert isinstance(applied, Applied)
    once = Receipts.once  # the refund step's receipt: the halt arrives while that step runs

    def once_then_halt(self, *args, **kwargs):
        result = once(self, *args, **kwargs)
        halt(store, "cli:olga", "look first", now=clock(), **scope)
        return result

    monkeypatch.setattr(Receipts, "once", once_then_halt)
    stopped = runner.resume_claimed(applied.run)
    monkeypatch.setattr(Receipts, "once", once)
    assert stopped.note == Note.HALTED and "look first" in stopped.line()
    run = runner.runs.get("t-halt-step")
    assert (
        run.status == "resuming"
        and run.owner == f"halted:{halts.scope_of(workflow=scope.get('workflow'))}"
    )
    assert len(Ledger(store.db).refunds("t-halt-step")) == 1  # the step it was in finished
    assert unhalt(store, "cli:olga", "seen", now=clock(), **scope) == 1
    [resumed] = runner.recovery_pass()
    assert resumed.status == "done" and len(Ledger(store.db).refunds("t-halt-step")) == 1


def test_halting_everything_holds_for_another_process(store, clock):
    """The halt is a row, not process memory: a second runner (another process's view) sees
    it, and so does one opened after a restart."""
    first, second = runner_at(store, clock), runner_at(store, clock)
    outcome = waiting(first, "t-halt-all")
    halt(store, "cli:olga", "incident 42", everything=True, now=clock())
    refused = claim(second, "t-halt-all", outcome.interrupt_id, APPROVE)
    assert isinstance(refused, Refused) and refused.reason == Refusal.HALTED
    from store.db import open_store

    with open_store() as again:  # a restart: a new pool, the same database
        assert [h.scope for h in halts.current(again.db)] == ["all"]


def test_unhalt_of_what_is_not_halted_is_refused(store, clock):
    from core.errors import UserError

    with pytest.raises(UserError, match="is not halted"):
        unhalt(store, "cli:olga", "oops", tool="issue_refund")
    with pytest.raises(UserError, match="exactly one"):
        halt(store, "cli:olga", "why", tool="x", workflow="y")
    with pytest.raises(UserError, match="say why"):
        halt(store, "cli:olga", "  ", everything=True)
    assert halts.current(store.db) == []


@pytest.fixture
def served(backend, monkeypatch):
    monkeypatch.setenv("WEBHOOK_SECRET", LOCAL_SECRET)
    app = create_app()
    with serve_app(app) as url:
        runner = app.state.runner
        keys = KeyStore(runner.store.db)
        headers = {}
        for name, role in (("ada", "admin"), ("olga", "operator"), ("rev", "reviewer")):
            _, token = keys.create(name, parse_roles([role]), parse_groups(()), None)
            headers[name] = {"authorization": f"Bearer {token}"}
        yield url, runner, headers


def test_the_admin_api_halts_and_a_decision_is_refused_423(served, clock):
    url, runner, who = served
    outcome = waiting(runner, "t-halt-api")
    body = {"tool": "issue_refund", "reason": "audit finding 7"}
    assert loopback.post(f"{url}/halts", json=body, headers=who["olga"]).status_code == 403
    made = loopback.post(f"{url}/halts", json=body, headers=who["ada"])
    assert made.status_code == 201, made.text
    assert made.json()["by"] == "api:ada" and made.json()["scope"] == "tool:issue_refund"
    listed = loopback.get(f"{url}/halts", headers=who["olga"]).json()["halts"]
    assert [h["scope"] for h in listed] == ["tool:issue_refund"]
    decision = {
        "interrupt_id": outcome.interrupt_id,
        "digest": runner.runs.get("t-halt-api").request_digest,
        "decisions": [{"type": "approve"}],
    }
    refused = loopback.post(f"{url}/runs/t-halt-api/decision", json=decision, headers=who["rev"])
    assert refused.status_code == 423, refused.text
    assert refused.json()["error"]["code"] == "halted"
    lifted = loopback.post(f"{url}/halts/lift", json=body, headers=who["ada"])
    assert lifted.status_code == 200 and lifted.json() == {"released": 0}
    again = loopback.post(f"{url}/halts/lift", json=body, headers=who["ada"])
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_halted"


def test_the_tables_are_unchanged_by_a_halted_decision(served, backend):
    """The same refusal, seen as every table's digest (checkpoints included)."""
    url, runner, who = served
    outcome = waiting(runner, "t-halt-tables")
    halt(runner.store, "cli:olga", "freeze", everything=True)
    env = {k: os.environ[k] for k in ("DATABASE_URL", "SQLITE_PATH") if k in os.environ}
    before = tables(env)
    decision = {
        "interrupt_id": outcome.interrupt_id,
        "digest": runner.runs.get("t-halt-tables").request_digest,
        "decisions": [{"type": "approve"}],
    }
    refused = loopback.post(f"{url}/runs/t-halt-tables/decision", json=decision, headers=who["rev"])
    assert refused.status_code == 423, refused.text
    assert tables(env) == before


def test_a_halt_and_its_lift_are_notified(store, clock, monkeypatch):
    from testkit.receiver import Receiver
    from testkit.wait import until

    receiver = Receiver().start()
    try:
        monkeypatch.setenv("NOTIFY_URLS", receiver.url)
        runner = runner_at(store, clock)
        halt(store, "cli:olga", "INC-42", tool="issue_refund", now=clock())
        unhalt(store, "cli:olga", "INC-42 closed", tool="issue_refund", now=clock())
        runner.sweeper.flush_outbox()
        until(lambda: len(receiver.got) == 2, "both notifications")
        got = [(r.json["type"], r.json["data"]) for r in receiver.got]
        assert got == [
            (
                "halt.on",
                {
                    "scope": "tool:issue_refund",
                    "reason": "INC-42",
                    "by": "cli:olga",
                    "released": None,
                },
            ),
            (
                "halt.off",
                {
                    "scope": "tool:issue_refund",
                    "reason": "INC-42 closed",
                    "by": "cli:olga",
                    "released": 0,
                },
            ),
        ]
    finally:
        receiver.stop()


def _signed_in(url: str, header: dict) -> httpx.Client:
    """A browser of the web inbox (its own cookies) signed in with an API key."""
    import re

    browser = httpx.Client(base_url=url, timeout=30)
    token = re.search(r'name="csrf" value="([^"]+)"', browser.get("/inbox/login").text)
    credential = header["authorization"].removeprefix("Bearer ")
    form = {"csrf": token[1] if token else "", "credential": credential, "next": "/inbox"}
    assert browser.post("/inbox/login", data=form).status_code == 303
    return browser


def test_the_operators_page_halts_and_lifts_for_admins_only(served):
    import re

    url, runner, who = served
    olga, ada = _signed_in(url, who["olga"]), _signed_in(url, who["ada"])
    page = olga.get("/inbox/halts")
    assert page.status_code == 200 and "Nothing is halted." in page.text
    assert 'id="halt-form"' not in page.text  # an operator sees, an admin acts
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    form = {"csrf": csrf[1] if csrf else "", "action": "halt", "kind": "all", "reason": "x"}
    assert olga.post("/inbox/halts", data=form).status_code == 403
    assert halts.current(runner.store.db) == []
    page = ada.get("/inbox/halts")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)[1]
    form = {"csrf": csrf, "action": "halt", "kind": "workflow", "name": "refund", "reason": "drill"}
    done = ada.post("/inbox/halts", data=form)
    assert done.status_code == 303
    listed = ada.get("/inbox/halts").text
    assert "workflow:refund" in listed and "inbox:ada" in listed and "drill" in listed
    lift = {"csrf": csrf, "action": "lift", "kind": "workflow", "name": "refund", "reason": "ok"}
    assert ada.post("/inbox/halts", data=lift).status_code == 303
    assert halts.current(runner.store.db) == []
    reasons = [e.reason for e in runner.runs.events(halts.HALTS_CHAIN)]
    assert reasons == ["halted", "unhalted"]


def test_a_signed_webhook_decision_is_refused_423_and_retried_after_unhalt(served):
    """A webhook's decision while halted is answered 423 and its delivery is not remembered,
    so the sender's retry after the unhalt applies it."""
    import json

    from testkit.servers import svix_headers

    url, runner, _ = served
    outcome = waiting(runner, "t-halt-hook")
    body = json.dumps(
        {
            "type": "interrupt.answered",
            "data": {
                "id": outcome.interrupt_id,
                "externalId": f"approval-worker:{outcome.thread_id}",
                "status": "answered",
                "actionRequests": [
                    {"name": "issue_refund", "decision": "approve", "decidedByName": "alice"}
                ],
            },
        }
    )
    halt(runner.store, "cli:olga", "hold", everything=True)

    def deliver() -> httpx.Response:
        headers = svix_headers(body, secret=LOCAL_SECRET, msg_id="msg_halt_1")
        return loopback.post(f"{url}/webhooks/local", content=body, headers=headers, timeout=60)

    before = snapshot(runner.store.db)
    refused = deliver()
    assert refused.status_code == 423 and refused.json()["error"]["code"] == "halted"
    assert snapshot(runner.store.db) == before
    unhalt(runner.store, "cli:olga", "go", everything=True)
    assert deliver().status_code == 202  # the same delivery, retried
    from testkit.wait import until

    until(lambda: runner.runs.get("t-halt-hook").status == "done", "the run done")
