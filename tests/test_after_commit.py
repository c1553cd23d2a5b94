"""Nothing after a commit strands a run (issue 40): counters are registered once, before any
request or resume can count, whatever the threads of a process do at once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from api.app import create_app
from core.faults import AFTER_COMMIT
from store.keys import KeyStore, parse_groups, parse_roles
from store.receipts import Receipts
from store.states import Event
from testkit import loopback
from testkit.databases import ROOT, worker_env
from testkit.faults import passes, raising_at
from testkit.servers import LOCAL_SECRET, serve_app, svix_headers
from testkit.wait import until

# The repro: eight threads of one process count for the first time at once.
_RACE = """
import threading
from ops import metrics
{prepare}
barrier = threading.Barrier(8)
def first_use():
    barrier.wait()
    metrics.transition("x")
threads = [threading.Thread(target=first_use) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
{total}
"""
_OWN_TOTAL = "print('total', metrics._own().transitions.labels('x')._value.get())"
_MULTIPROCESS_TOTAL = """
from prometheus_client import CollectorRegistry, multiprocess
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print('total', registry.get_sample_value('approval_transitions_total', {'kind': 'x'}))
"""


def _race(prepare: str, total: str, **env: str) -> subprocess.CompletedProcess:
    script = _RACE.format(prepare=prepare, total=total)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
        env=worker_env({}, **env),
    )


def test_the_apps_first_counts_at_once_all_count(tmp_path):
    """The app's start-up (``METRICS_TOKEN``: ``api.ops.database_gauges`` calls
    ``metrics.serve``), then the repro: no thread dies of ``DuplicateTimeseries``."""
    proc = _race("metrics.serve()", _OWN_TOTAL, METRICS_TOKEN="t" * 32)
    assert proc.returncode == 0, proc.stderr
    assert "DuplicateTimeseries" not in proc.stderr
    assert "Exception" not in proc.stderr, proc.stderr
    assert "total 8.0" in proc.stdout, (proc.stdout, proc.stderr)


def test_a_resumer_processs_first_counts_at_once_all_count(tmp_path):
    """A resumer process collecting into ``PROMETHEUS_MULTIPROC_DIR`` (its start-up,
    ``api.resumers.count_for_app``), then eight resume threads counting at once."""
    prom = tmp_path / "prom"
    prom.mkdir()
    proc = _race(
        "from api.resumers import count_for_app; count_for_app(None)",
        _MULTIPROCESS_TOTAL,
        PROMETHEUS_MULTIPROC_DIR=str(prom),
    )
    assert proc.returncode == 0, proc.stderr
    assert "DuplicateTimeseries" not in proc.stderr
    assert "Exception" not in proc.stderr, proc.stderr
    assert "total 8.0" in proc.stdout, (proc.stdout, proc.stderr)


def test_first_use_without_start_up_is_safe_too(tmp_path):
    """A process that never called ``prepare`` (a script counting into the multiprocess
    directory): the first use registers once, under the lock."""
    prom = tmp_path / "prom"
    prom.mkdir()
    proc = _race("", _MULTIPROCESS_TOTAL, PROMETHEUS_MULTIPROC_DIR=str(prom))
    assert proc.returncode == 0, proc.stderr
    assert "Exception" not in proc.stderr, proc.stderr
    assert "total 8.0" in proc.stdout, (proc.stdout, proc.stderr)


# -- a fault at each point after a commit, on the start, decision and resume paths -------------

EDIT = {"order_id": "A-1001", "amount": 0.01, "reason": "fault test"}  # A-1001 covers many
REQUEST = "Refund order A-1001: the kettle arrived broken"


@dataclass
class Site:
    url: str
    runner: Any
    headers: dict[str, dict[str, str]]
    deliveries: int = 0

    def start(self, **body: str) -> httpx.Response:
        return loopback.post(
            f"{self.url}/runs",
            json={"input": REQUEST, **body},
            headers=self.headers["rita"],
            timeout=60,
        )

    def view(self, thread_id: str) -> dict:
        reply = loopback.get(
            f"{self.url}/runs/{thread_id}", headers=self.headers["olga"], timeout=60
        )
        assert reply.status_code == 200, reply.text
        return reply.json()

    def decide_api(self, view: dict) -> httpx.Response:
        approval = view["approval"]
        body = {
            "interrupt_id": approval["interrupt_id"],
            "digest": approval["digest"],
            "decisions": [
                {"type": "edit", "edited_action": {"name": "issue_refund", "args": EDIT}}
            ],
        }
        url = f"{self.url}/runs/{view['thread_id']}/decision"
        return loopback.post(url, json=body, headers=self.headers["rev"], timeout=60)

    def decide_webhook(self, view: dict, msg_id: str) -> httpx.Response:
        item = {"name": "issue_refund", "decision": "edit", "editedArgs": EDIT}
        body = json.dumps(
            {
                "type": "interrupt.answered",
                "data": {
                    "id": view["approval"]["interrupt_id"],
                    "externalId": f"approval-worker:{view['thread_id']}",
                    "actionRequests": [{**item, "decidedByName": "alice"}],
                },
            }
        )
        headers = svix_headers(body, secret=LOCAL_SECRET, msg_id=msg_id)
        return loopback.post(
            f"{self.url}/webhooks/local", content=body, headers=headers, timeout=60
        )


@pytest.fixture
def site(backend, monkeypatch) -> Iterator[Site]:
    """The app under uvicorn in this process (so a fault hook reaches every thread of it),
    metrics on, resumes on its own threads; a requester, a reviewer and an operator."""
    from ops import metrics

    monkeypatch.setattr(metrics, "_serving", metrics._serving)  # restored after the test
    monkeypatch.setenv("WEBHOOK_SECRET", LOCAL_SECRET)
    monkeypatch.setenv("METRICS_TOKEN", "m" * 32)
    monkeypatch.setenv("RESUME_PROCESSES", "0")
    app = create_app()
    with serve_app(app) as url:
        runner = app.state.runner
        keys = KeyStore(runner.store.db)
        headers = {}
        for name, role in (("rita", "requester"), ("rev", "reviewer"), ("olga", "operator")):
            _, token = keys.create(name, parse_roles([role]), parse_groups(()), None)
            headers[name] = {"authorization": f"Bearer {token}"}
        yield Site(url, runner, headers)


def _started(site: Site, reply: httpx.Response) -> dict:
    """A start's answer is the committed run (in full, or its id and status when the full
    answer failed to render); the run waits on its approval either way."""
    assert reply.status_code == 201, reply.text
    body = reply.json()
    assert body["status"] == "waiting", body
    view = site.view(body["thread_id"])
    assert view["status"] == "waiting", view
    return view


@pytest.mark.parametrize("point", AFTER_COMMIT)
def test_a_fault_after_any_commit_leaves_no_run_without_its_next_step(site, point):
    """Raise at ``point`` every time it is passed, through two starts (a chosen id, a drawn
    one), an API decision, a signed webhook's and both resumes: each answer is the committed
    result, both runs are done at once (the lease, 300 s, never runs out here: nothing waits for
    it), a sweep finds nothing left to do, and a repeated request answers what was done."""
    with raising_at(point) as hits:
        by_api = _started(site, site.start(thread_id="fault-api"))
        by_webhook = _started(site, site.start())

        decided = site.decide_api(by_api)
        assert decided.status_code == 202, decided.text
        assert decided.json()["status"] == "accepted"
        delivered = site.decide_webhook(by_webhook, "msg_fault_1")
        assert delivered.status_code == 202, delivered.text
        assert delivered.json()["status"] == "accepted"

        for view in (by_api, by_webhook):
            tid = view["thread_id"]
            until(lambda t=tid: site.view(t)["status"] == "done", f"{tid} done after {point}")
    assert hits, f"no request passed {point}"

    assert site.runner.sweep() == []  # nothing left behind for a sweep, no lease waited for
    for view in (by_api, by_webhook):
        events = site.runner.runs.events(view["thread_id"])
        reasons = [e.reason for e in events]
        assert Event.RECLAIMED not in reasons, reasons  # no lease ran out
        assert reasons.count(Event.TAKEN_UP) == 1, reasons  # the claim taken off the queue once
        assert reasons.count(Event.FINISHED) == 1, reasons
    receipts = Receipts(site.runner.store.db)
    for view in (by_api, by_webhook):
        assert len(receipts.for_thread(view["thread_id"])) == 1  # one refund each, not two

    # repeated requests answer what was done
    again = site.start(thread_id="fault-api")
    assert again.status_code == 200 and again.json()["status"] == "done", again.text
    repeated = site.decide_api(by_api)
    assert repeated.status_code == 409, repeated.text
    redelivered = site.decide_webhook(by_webhook, "msg_fault_1")
    assert redelivered.status_code == 200, redelivered.text
    assert redelivered.json()["status"] == "ignored"


# -- load: two workers, metrics on, 300 runs started and decided at once ------------------------

LOAD_RUNS = 300


def _sample(text: str, name: str, **labels: str) -> float:
    """One sample of the Prometheus text ``text`` (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


@pytest.mark.slow
def test_300_runs_started_and_decided_at_once_on_two_workers_are_all_done(postgres_url, tmp_path):
    """``uvicorn --workers 2`` on Postgres with ``METRICS_TOKEN`` and
    ``PROMETHEUS_MULTIPROC_DIR`` (so each worker's resumer process counts too); 300 runs
    started at once, then decided at once, half by the API, half by signed webhooks. Every run
    is done by its hand-off: the lease (an hour) never runs out here, one sweep afterwards finds
    nothing to do, no process died of a metric, and the counters equal the database."""
    from concurrent.futures import ThreadPoolExecutor

    from store.db import open_store
    from testkit.databases import api_key, fresh_database, pointed_at
    from testkit.servers import start_server
    from worker.runner import open_runner

    prom = tmp_path / "prom"
    prom.mkdir()
    token = "m" * 32
    with fresh_database("postgres", tmp_path, postgres_url) as db_env:
        env = worker_env(
            db_env,
            WEBHOOK_SECRET=LOCAL_SECRET,
            METRICS_TOKEN=token,
            PROMETHEUS_MULTIPROC_DIR=str(prom),
            LEASE_SECONDS="3600",
            MAX_OPEN_RUNS="1000",
        )
        server = start_server(env, tmp_path / "app.log", workers=2, access_log=False)
        try:
            headers = {
                "rita": api_key(db_env, "rita", "requester"),
                "rev": api_key(db_env, "rev", "reviewer"),
                "olga": api_key(db_env, "olga", "operator"),
            }
            site = Site(server.url, None, headers)
            with ThreadPoolExecutor(8) as pool:
                started = list(
                    pool.map(lambda i: site.start(thread_id=f"load-{i}"), range(LOAD_RUNS))
                )
                assert [r.status_code for r in started] == [201] * LOAD_RUNS
                views = [r.json() for r in started]
                assert {v["status"] for v in views} == {"waiting"}

                def decide(i: int) -> httpx.Response:
                    if i % 2:
                        return site.decide_webhook(views[i], f"msg_load_{i}")
                    return site.decide_api(views[i])

                decided = list(pool.map(decide, range(LOAD_RUNS)))
            assert [r.status_code for r in decided] == [202] * LOAD_RUNS, [
                r.text for r in decided if r.status_code != 202
            ][:3]
            ids = [v["thread_id"] for v in views]
            with pointed_at(db_env), open_store() as store:

                def unfinished() -> list[str]:
                    rows = store.db.all("SELECT thread_id, status FROM runs")
                    return [r["thread_id"] for r in rows if r["status"] != "done"]

                until(lambda: not unfinished(), "every run done by its hand-off", timeout=600)
            with pointed_at(db_env), open_runner() as runner:
                assert runner.sweep() == []  # one sweep: nothing left, no lease waited for
                assert all(runner.runs.get(t).status == "done" for t in ids)
                receipts = Receipts(runner.store.db)
                assert all(len(receipts.for_thread(t)) == 1 for t in ids)  # one refund each
                for t in ids[:: LOAD_RUNS // 30]:
                    reasons = [e.reason for e in runner.runs.events(t)]
                    assert Event.RECLAIMED not in reasons, reasons
            scrape = loopback.get(
                f"{server.url}/metrics", headers={"authorization": f"Bearer {token}"}, timeout=60
            )
            assert scrape.status_code == 200
            counted = _sample(scrape.text, "approval_transitions_total", kind="finished")
            claims = _sample(scrape.text, "approval_claims_total", outcome="won")
            assert (counted, claims) == (LOAD_RUNS, LOAD_RUNS), (counted, claims)
        finally:
            server.stop()
        log = (tmp_path / "app.log").read_text()
        assert "DuplicateTimeseries" not in log
        assert "not counted" not in log and "carried on past" not in log


# -- the operators' Retry and a stuck run's take-over go through the same hand-off --------------


def test_an_operators_retry_is_handed_to_the_apps_resumer(site):
    """A resume that failed (a fault where it starts) is retried by an operator: the request
    claims the retry and answers at once; a resume thread of the app carries it on, as for a
    decision, and the run is done."""
    run = _started(site, site.start(thread_id="retried"))
    with raising_at("resume.start"):
        assert site.decide_api(run).status_code == 202
        until(lambda: site.view(run["thread_id"])["status"] == "failed", "the resume failed")
    with raising_at("resume.claimed", raising=False) as resumed_on:
        url = f"{site.url}/runs/{run['thread_id']}/retry"
        retried = loopback.post(url, headers=site.headers["olga"], timeout=60)
        assert retried.status_code == 200, retried.text
        assert retried.json()["status"] in ("resuming", "done"), retried.text
        until(lambda: site.view(run["thread_id"])["status"] == "done", "the retry done")
    assert resumed_on and all(name.startswith("resume") for name in resumed_on), resumed_on


def test_a_stuck_run_is_taken_over_alone_and_handed_to_the_resumer(site):
    """A run whose process died (its lease ran out) is taken over by itself, not with every
    other stuck run, and resumed by the app's resumer; one still leased is left alone."""
    from store.runs import RunStore

    runner = site.runner
    past = RunStore(runner.store.db, clock=lambda: time.time() - 7200)  # leased two hours ago
    for tid in ("stuck-1", "stuck-2"):
        past.create(tid, "refund", {"text": REQUEST}, owner="run@gone:1:dead", requested_by="rita")
    live = RunStore(runner.store.db).create(
        "leased", "refund", {"text": REQUEST}, owner="run@alive:2:busy", requested_by="rita"
    )
    assert live is not None
    taken = runner.take_over("stuck-1")
    assert taken is not None and taken.status == "running"
    until(lambda: runner.runs.get("stuck-1").status == "waiting", "the stuck run carried on")
    assert runner.runs.get("stuck-2").status == "running"  # not taken with it
    assert runner.runs.get("stuck-2").owner == "run@gone:1:dead"
    assert runner.take_over("leased") is None  # its process may be alive


def test_a_pending_decision_has_one_answer_shape_on_every_json_source(site, monkeypatch):
    """Two approvers needed: the API's and a signed webhook's answer to the first approval are
    the same shape (``Pending.answer``), naming the run, the approvers so far and the quorum."""
    monkeypatch.setenv("REFUND_QUORUM_AMOUNT", "0.00")
    monkeypatch.setenv("REFUND_QUORUM", "2")
    by_api = _started(site, site.start(thread_id="pending-api"))
    by_webhook = _started(site, site.start(thread_id="pending-webhook"))
    api = site.decide_api(by_api)
    webhook = site.decide_webhook(by_webhook, "msg_pending_1")
    assert (api.status_code, webhook.status_code) == (202, 200), (api.text, webhook.text)
    assert api.json() == {
        "status": "approval recorded",
        "thread_id": by_api["thread_id"],
        "approvers": ["rev"],
        "quorum": 2,
    }
    assert webhook.json() == {
        **api.json(),
        "thread_id": by_webhook["thread_id"],
        "approvers": ["alice"],
    }


def test_every_sources_applied_decision_reaches_the_apps_one_resumer(site):
    """The API, a signed webhook, ``/lg`` (``runs.create`` and ``runs.wait``), the inbox
    command line and the reviewer page (an operator's retry: the test above): each claim is
    queued once in the database, wakes the app's resumer (``Runner.hand_off``), and is taken
    off the queue once by it and resumed on its threads, never in the request."""
    from testkit.decide import answer

    views = {
        name: _started(site, site.start(thread_id=name))
        for name in ("api", "webhook", "lg", "lg-wait", "cli", "page")
    }
    with passes("handoff.queued", "resume.claimed") as hits:
        assert site.decide_api(views["api"]).status_code == 202
        assert site.decide_webhook(views["webhook"], "msg_one_1").status_code == 202
        for name, path in (("lg", "runs"), ("lg-wait", "runs/wait")):
            approval = views[name]["approval"]
            decision = {"type": "edit", "edited_action": {"name": "issue_refund", "args": EDIT}}
            body = {
                "command": {"resume": {"decisions": [decision]}},
                "checkpoint_id": approval["interrupt_id"],
            }
            url = f"{site.url}/lg/threads/{views[name]['thread_id']}/{path}"
            reply = loopback.post(url, json=body, headers=site.headers["rev"], timeout=60)
            assert reply.status_code == 200, reply.text
        cli = views["cli"]
        # an edit like the others: the four before refunded part of the order, so a plain
        # approve of the whole would be refused as more than is still refundable
        edit = {"type": "edit", "edited_action": {"name": "issue_refund", "args": EDIT}}
        answer(site.runner, cli["approval"]["interrupt_id"], [edit], "carol")
        tid = views["page"]["thread_id"]
        page = _page_session(site, "rev")
        try:
            edited = {f"a0.{k}": str(v) for k, v in EDIT.items()}
            form = _decision_form(page.get(f"/inbox/requests/{tid}").text, "edit", edited)
            posted = page.post(f"/inbox/requests/{tid}/decide", data=form)
            assert posted.status_code == 202, posted.text[-2000:]  # applied
        finally:
            page.close()
        for view in views.values():
            tid = view["thread_id"]
            until(lambda t=tid: site.view(t)["status"] == "done", f"{tid} done")
    assert len(hits["handoff.queued"]) == len(views), hits
    assert len(hits["resume.claimed"]) == len(views), hits
    assert all(name.startswith("resume") for name in hits["resume.claimed"]), hits
    for view in views.values():  # each claim queued, then taken off the queue once, by it
        taken = [
            e.actor
            for e in site.runner.runs.events(view["thread_id"])
            if e.reason == Event.TAKEN_UP
        ]
        assert len(taken) == 1 and taken[0].startswith("resumer@"), taken


def _hidden(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found, f"no {name} field on the page"
    return found.group(1)


def _decision_form(html: str, d0: str, fields: dict[str, str] | None = None) -> dict[str, str]:
    """The request page's form as a reviewer posts it: what the page showed, and the choice."""
    shown = {name: _hidden(html, name) for name in ("csrf", "interrupt_id", "digest")}
    return {**shown, "d0": d0, **(fields or {})}


def _page_session(site: Site, who: str) -> httpx.Client:
    """A client signed in to the reviewer pages as ``who`` (the sign-in form, as a browser
    posts it)."""
    client = httpx.Client(base_url=site.url, timeout=60)
    form = client.get("/inbox/login")
    credential = site.headers[who]["authorization"].split(" ", 1)[1]
    fields = {"credential": credential, "csrf": _hidden(form.text, "csrf"), "next": "/inbox"}
    signed_in = client.post("/inbox/login", data=fields)
    assert signed_in.status_code == 303, signed_in.text
    return client


def test_a_page_that_fails_after_its_claim_still_has_its_run_resumed_at_once(site):
    """The reviewer page's answer fails after the decision claimed the run (a fault where the
    page renders it): the run was handed off already and is done, and the same form posted
    again answers that it was decided."""
    view = _started(site, site.start(thread_id="paged"))
    tid = view["thread_id"]
    page = _page_session(site, "rev")
    try:
        form = _decision_form(page.get(f"/inbox/requests/{tid}").text, "approve")
        with raising_at("decide.answer") as hits:
            failed = page.post(f"/inbox/requests/{tid}/decide", data=form)
            assert failed.status_code == 500  # the page, not the decision, failed
            until(lambda: site.view(tid)["status"] == "done", "the run resumed at once")
        assert hits
        again = page.post(f"/inbox/requests/{tid}/decide", data=form)
        assert again.status_code == 409 and "already decided" in again.text, again.text
    finally:
        page.close()
