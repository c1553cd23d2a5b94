"""One trace per run (issue 38): a run started over HTTP with a ``traceparent`` keeps that trace
through decision attempts from every source, the pause, the claim, and a resume by another
process, which exports over OTLP/HTTP to a stand-in on 127.0.0.1 (protobuf decoded here). In
this process the SDK's in-memory exporter holds the spans; the two halves join into one tree.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Iterator

import httpx
import pytest
from conftest import run_cli
from servers import answered_event, approve_item, sign, worker_env

from api.app import create_app
from core import tracing
from core.logs import _fields
from store.db import open_store
from store.keys import KeyStore, parse_groups, parse_roles
from testkit.clock import HOUR, runner_at
from testkit.databases import CANARY, ROOT, api_key, fresh_database, pointed_at
from testkit.decide import answer
from testkit.lambdas import invoke
from testkit.otlp import Span, collector, from_sdk, in_memory
from testkit.receiver import Receiver
from testkit.servers import LOCAL_SECRET, free_port, serve_app
from testkit.wait import until
from worker.ballot import Decision, Source
from worker.refusals import Refused
from worker.runner import Runner

TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER = "b7ad6b7169203331"  # the span of the client that started the run
GIVEN = f"00-{TRACE}-{CALLER}-01"
COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")
A1004 = "Refund order A-1004: desk wobbles"  # 540.00 EUR: waits for an approval


@pytest.fixture
def served(backend, monkeypatch) -> Iterator[tuple[str, Runner, dict[str, dict], list[str]]]:
    """The app in this process: its URL, runner, the headers of a requester (rita) and a
    reviewer (alice), and every credential made (none may appear in a trace)."""
    monkeypatch.setenv("WEBHOOK_SECRET", LOCAL_SECRET)
    monkeypatch.setenv("SEPARATION_OF_DUTIES", "true")
    app = create_app()
    with serve_app(app) as url:
        runner: Runner = app.state.runner
        keys = KeyStore(runner.store.db)
        headers, tokens = {}, []
        for name, role in (("rita", "requester"), ("alice", "reviewer")):
            _, token = keys.create(name, parse_roles([role]), parse_groups(()), None)
            headers[name] = {"authorization": f"Bearer {token}"}
            tokens.append(token)
        yield url, runner, headers, tokens


def start(url: str, who: dict) -> dict:
    reply = httpx.post(
        f"{url}/runs", json={"input": A1004}, headers={**who, "traceparent": GIVEN}, timeout=60
    )
    assert reply.status_code == 201, reply.text
    assert reply.json()["status"] == "waiting"
    return reply.json()


def attempt(runner: Runner, run: dict, source: Source, by: str, **kw: object) -> Refused:
    """A decision attempt as ``source`` turns its input into one, refused for its reason."""
    approval = run["approval"]
    decision = Decision(
        run["thread_id"], approval["interrupt_id"], [{"type": "approve"}], [by], source
    )
    decision = Decision(**{**vars(decision), **kw})  # type: ignore[arg-type]
    result = runner.decide(decision)
    assert isinstance(result, Refused), result
    return result


def tree(spans: list[Span]) -> dict[str, Span]:
    """Every span by id, after checking they are one trace with every parent present (the
    start's parent is the caller's span, outside this product)."""
    assert spans
    assert {s.trace_id for s in spans} == {TRACE}, sorted({(s.name, s.trace_id) for s in spans})
    by_id = {s.span_id: s for s in spans}
    orphans = [s.name for s in spans if s.parent_id not in by_id and s.parent_id != CALLER]
    assert orphans == [], orphans
    return by_id


def no_secret_in(spans: list[Span], secrets: list[str]) -> None:
    text = repr([(s.name, s.attributes, s.resource) for s in spans])
    for secret in [*secrets, CANARY, LOCAL_SECRET, "Bearer"]:
        assert secret not in text
    assert "@" not in repr([s.attributes for s in spans])  # no e-mail address, no owner host


def test_a_run_is_one_trace_across_sources_the_pause_and_another_process(
    served, monkeypatch, tmp_path
):
    url, runner, who, tokens = served
    with in_memory() as exporter:
        run = start(url, who["rita"])
        thread_id = run["thread_id"]
        stored = runner.store.db.one(
            "SELECT traceparent FROM runs WHERE thread_id = :t", {"t": thread_id}
        )
        assert stored["traceparent"].split("-")[1] == TRACE

        # refused attempts, each as what its source is, each with its reason
        reasons = {
            Source.SLACK: attempt(runner, run, Source.SLACK, "alice", digest="0" * 32),
            Source.EMAIL: attempt(runner, run, Source.EMAIL, "alice", interrupt_id="other"),
            Source.PAGE: attempt(runner, run, Source.PAGE, "rita"),  # her own request
            Source.WEBHOOK: attempt(runner, run, Source.WEBHOOK, "alice", decisions=[]),
            Source.LANGGRAPH: attempt(runner, run, Source.LANGGRAPH, "alice", digest="x"),
        }
        refused_api = httpx.post(
            f"{url}/runs/{thread_id}/decision",
            json={
                "interrupt_id": run["approval"]["interrupt_id"],
                "digest": "f" * 32,
                "decisions": [{"type": "approve"}],
            },
            headers=who["alice"],
            timeout=30,
        )
        assert refused_api.status_code == 409, refused_api.text
        # accepted through the inbox command line, which hands the resume off
        answer(runner, run["approval"]["interrupt_id"], [{"type": "approve"}], "alice@example.com")
        local = from_sdk(exporter.get_finished_spans())

    with collector() as (endpoint, got):  # the sweep takes the hand-off up, in its own process
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "sweeper")
        run_cli("recover.py")
        assert runner.runs.get(thread_id).status == "done"
        assert got.requests and {c for _, c in got.requests} == {"application/x-protobuf"}
        remote = list(got.spans)

    spans = [s for s in local if s.trace_id == TRACE] + remote
    by_id = tree(spans)
    named = {}
    for s in spans:
        named.setdefault(s.name, []).append(s)

    server = named["POST /runs"][0]  # the request that started the run, the caller's child
    assert server.parent_id == CALLER
    root = named["approval_worker.start"][0]
    assert root.parent_id == server.span_id
    assert root.attributes["approval_worker.thread_id"] == thread_id
    assert named["approval_worker.segment"][0].parent_id == root.span_id

    attempts = named["approval.decide"]
    assert all(a.parent_id == root.span_id for a in attempts)
    by_source = {a.attributes["approval.source"]: a for a in attempts}
    assert set(by_source) == {"slack", "email", "page", "webhook", "langgraph", "api", "cli"}
    for source, refusal in reasons.items():
        got_reason = by_source[{"inbox": "cli"}.get(source, str(source))].attributes
        assert got_reason["approval.outcome"] == "refused"
        assert got_reason["approval.refusal.reason"] == refusal.reason.name.lower()
    assert by_source["slack"].attributes["approval.provenance"] == "slack"
    assert by_source["email"].attributes["approval.provenance"] == "email_link"
    api = by_source["api"]
    assert api.attributes["approval.refusal.reason"] == "stale"
    assert api.links, "the API attempt links the request it came in (a trace of its own)"

    applied = by_source["cli"].attributes
    assert applied["approval.outcome"] == "applied" and applied["approval.status"] == "approved"
    assert applied["approval.provenance"] == "cli"
    assert list(applied["approval.approver_id"])[0].startswith("sha256:")  # an address, hidden
    paused = named["approval_worker.segment"][0]  # the segment that paused says what it asks
    requested = dict(paused.events)["approval.requested"]
    assert requested["approval.amount"] == "540.00" and requested["approval.currency"] == "EUR"
    assert requested["approval.request_digest"] == run["approval"]["digest"]
    assert applied["approval.request_digest"] == run["approval"]["digest"]
    claim = named["approval.claim"][0]
    assert claim.parent_id == by_source["cli"].span_id
    pause = named["approval.pause"][0]
    assert pause.parent_id == root.span_id and pause.attributes["approval.status"] == "approved"
    assert pause.attributes["approval.wait_seconds"] >= 0 and pause.end_ns >= pause.start_ns

    # the resume ran in the sweeper, under the run's root, and the refund under the resume
    resume = named["approval_worker.resume"][0]
    assert resume in remote and resume.parent_id == root.span_id
    assert resume.resource["service.name"] == "sweeper"
    assert resume.resource["process.pid"] != os.getpid()
    segment = next(s for s in remote if s.name == "approval_worker.segment")
    assert segment.parent_id == resume.span_id
    refund = named["execute_tool issue_refund"][0]
    assert refund in remote and by_id[refund.parent_id] == segment
    assert refund.attributes["approval_worker.tool.acted"] is True
    no_secret_in(spans, tokens)


def test_tracing_is_off_without_the_standard_settings_and_writes_nothing(store):
    tracing.install(None)
    assert not tracing.enabled() and tracing.current() is None
    with tracing.span("anything") as span:
        assert span is tracing.NULL
    runner = Runner(store)
    outcome = runner.start(A1004)
    assert outcome.status == "waiting"
    row = store.db.one(
        "SELECT traceparent FROM runs WHERE thread_id = :t", {"t": outcome.thread_id}
    )
    assert row["traceparent"] is None  # nothing written while off


def test_log_lines_carry_the_trace_and_span_ids():
    with in_memory() as exporter, tracing.span("outer", parent=GIVEN):
        fields = _fields(logging.LogRecord("x", logging.INFO, "", 0, "hello", None, None))
    spans = from_sdk(exporter.get_finished_spans())
    assert fields["trace_id"] == TRACE and fields["span_id"] == spans[0].span_id


def test_a_served_app_and_recover_export_to_an_otlp_http_collector(postgres_url, tmp_path):
    """``approval-worker serve`` and ``approval-worker recover`` as an operator runs them, with
    the standard variables only; the stand-in decodes what they send."""
    second = f"00-{'1' * 32}-{CALLER}-01"
    with (
        fresh_database("postgres", tmp_path, postgres_url) as db_env,
        collector() as (endpoint, got),
    ):
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        env = worker_env(db_env, **otel, OTEL_SERVICE_NAME="served")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(tmp_path / "serve.log", "w") as log:
            serve = subprocess.Popen(
                [COMMAND, "serve", "--port", str(port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
            )
        try:
            until(lambda: healthy(url), "approval-worker serve answers /healthz")
            rita = api_key(db_env, "rita", "requester")
            alice = api_key(db_env, "alice", "reviewer")
            run = started(url, rita, GIVEN)
            approval = run["approval"]
            decided = httpx.post(
                f"{url}/runs/{run['thread_id']}/decision",
                json={
                    "interrupt_id": approval["interrupt_id"],
                    "digest": approval["digest"],
                    "decisions": APPROVE,
                },
                headers=alice,
                timeout=30,
            )
            assert decided.status_code == 202, decided.text
            until(lambda: refund_in(got.spans, TRACE), "the served app's refund, exported")

            # a decision handed off (the inbox command line): recover resumes it
            other = started(url, rita, second, "Refund order A-1002: it leaks")
            with pointed_at(db_env), open_store() as store:
                answer(Runner(store), other["approval"]["interrupt_id"], APPROVE, "alice")
        finally:
            serve.terminate()
            serve.wait(timeout=30)
        recover = subprocess.run(
            [COMMAND, "recover"],
            env={**env, "OTEL_SERVICE_NAME": "recover"},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert recover.returncode == 0, recover.stderr
        spans = list(got.spans)

    served_spans = [s for s in spans if s.resource.get("service.name") == "served"]
    assert {"POST /runs", "approval_worker.start", "approval.decide", "approval.pause"} <= {
        s.name for s in served_spans
    }
    recovered = [s for s in spans if s.resource.get("service.name") == "recover"]
    assert {s.trace_id for s in recovered} == {"1" * 32}
    assert refund_in(recovered, "1" * 32)
    root = next(s for s in spans if s.name == "approval_worker.start" and s.trace_id == "1" * 32)
    resume = next(s for s in recovered if s.name == "approval_worker.resume")
    assert resume.parent_id == root.span_id
    no_secret_in(spans, [rita["authorization"], alice["authorization"]])


APPROVE = [{"type": "approve"}]


def started(url: str, who: dict, traceparent: str, text: str = A1004) -> dict:
    headers = {**who, "traceparent": traceparent}
    reply = httpx.post(f"{url}/runs", json={"input": text}, headers=headers, timeout=60)
    assert reply.status_code == 201 and reply.json()["status"] == "waiting", reply.text
    return reply.json()


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def refund_in(spans: list[Span], trace_id: str) -> bool:
    return any(s.name == "execute_tool issue_refund" and s.trace_id == trace_id for s in spans)


def test_a_notification_carries_the_runs_trace_to_its_receiver(store, monkeypatch):
    receiver = Receiver().start()
    try:
        monkeypatch.setenv("NOTIFY_URLS", receiver.url)
        with in_memory() as exporter:
            runner = Runner(store)
            with tracing.span("caller", parent=GIVEN):
                outcome = runner.start(A1004)
            runner.sweeper.flush_outbox()
            got = until(lambda: receiver.got, "the approval.requested notification")

            def posted() -> list[Span]:  # the client span ends once the receiver answered
                return [s for s in from_sdk(exporter.get_finished_spans()) if s.name == "POST"]

            [sent] = until(posted, "the delivery's span")
            spans = from_sdk(exporter.get_finished_spans())
    finally:
        receiver.stop()
    header = got[0].headers["traceparent"]
    assert header.split("-")[1:3] == [TRACE, sent.span_id]  # the receiver joins the run's trace
    root = next(s for s in spans if s.name == "approval_worker.start")
    assert sent.parent_id == root.span_id
    assert sent.attributes["approval_worker.event_type"].startswith("notification")
    assert got[0].json["data"]["thread_id"] == outcome.thread_id


def test_the_lambda_handler_resumes_in_the_runs_trace(runner: Runner):
    with in_memory():
        with tracing.span("caller", parent=GIVEN):
            outcome = runner.start(A1004, thread_id="t-lambda-trace")
    body = answered_event(outcome.interrupt_id, "t-lambda-trace", [approve_item()])
    with collector() as (endpoint, got):
        reply = invoke(
            "handler",
            "apigw_v2_http_api.json",
            body,
            sign(body, msg_id="msg_trace_1"),
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_SERVICE_NAME="lambda",
        )["answer"]
        spans = list(got.spans)  # exported before the handler answered: nothing is left to flush
    assert reply["statusCode"] == 200 and json.loads(reply["body"])["status"] == "done", reply
    ours = [s for s in spans if s.trace_id == TRACE]
    names = {s.name for s in ours}
    assert {"approval.decide", "approval.pause", "approval_worker.resume"} <= names, names
    assert "execute_tool issue_refund" in names
    decided = next(s for s in ours if s.name == "approval.decide").attributes
    assert decided["approval.source"] == "webhook" and decided["approval.outcome"] == "applied"
    assert decided["approval.provenance"] == "inbox_webhook"


def test_an_expired_wait_is_a_pause_span_of_the_time_waited(store, clock):
    runner = runner_at(store, clock)
    with in_memory() as exporter:
        with tracing.span("caller", parent=GIVEN):
            outcome = runner.start(A1004, expires_in="2h")
        clock.now += 2 * HOUR
        assert [o.status for o in runner.sweeper.expire_overdue()] == ["expired"]
        spans = from_sdk(exporter.get_finished_spans())
    [pause] = [s for s in spans if s.name == "approval.pause"]
    root = next(s for s in spans if s.name == "approval_worker.start")
    assert pause.trace_id == TRACE and pause.parent_id == root.span_id
    assert pause.attributes["approval.status"] == "expired"
    assert pause.attributes["approval.wait_seconds"] == 2 * HOUR
    assert pause.end_ns - pause.start_ns == 2 * HOUR * 1_000_000_000
    assert pause.attributes["approval.interrupt_id"] == outcome.interrupt_id
