"""One trace per run (issue 38): a run started over HTTP with a ``traceparent`` keeps that trace
through decision attempts from every source, the pause, the claim, and a resume by another
process, which exports over OTLP/HTTP to a stand-in on 127.0.0.1 (protobuf decoded here). In
this process the SDK's in-memory exporter holds the spans; the two halves join into one tree.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from conftest import run_cli
from langgraph_sdk import get_sync_client

from api.app import create_app
from api.serverless import close_resumers
from core import tracing
from core.logs import _fields
from store.db import open_store
from store.keys import KeyStore, parse_roles
from testkit import loopback, zygote
from testkit.clock import HOUR, runner_at
from testkit.databases import CANARY, ROOT, TEST_SERVER, api_key, fresh_database, pointed_at
from testkit.decide import answer
from testkit.lambdas import invoke
from testkit.mail import MailBox, links
from testkit.otlp import Span, collector, from_sdk, in_memory
from testkit.receiver import Receiver
from testkit.servers import LOCAL_SECRET, free_port, serve_app
from testkit.slack import SlackStandIn, link_slack, press, signed_interaction
from testkit.sources import APPROVE, Site, typed, via_api, via_page, via_webhook
from testkit.wait import until
from testkit.webapp import answered_event, approve_item, sign, worker_env
from worker.refusals import Refusal
from worker.runner import Runner

TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER = "b7ad6b7169203331"  # the span of the client that started the run
GIVEN = f"00-{TRACE}-{CALLER}-01"
COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")
A1004 = "Refund order A-1004: desk wobbles"  # 540.00 EUR: waits for an approval


SLACK_TOKEN = "xoxb-trace-token"
SLACK_SIGNING = "slack-signing-secret-for-traces"
LINK_SECRET = "link-secret-for-traces-0123456789abcdef"
ALICE = "alice@example.test"
CAROL = "carol@example.com"  # the inbox command line's user: an address, hidden in a trace
ACCEPT = [{"type": "accept", "args": None}]  # LangGraph's Agent Inbox answer


@dataclass
class Served:
    """The app in this process, with Slack's API and a mail server stood in for on 127.0.0.1."""

    site: Site  # its URL, runner, and the headers of rita (requester and reviewer) and alice
    raw: dict[str, str]  # the same keys, bare (the LangGraph client sends them as x-api-key)
    slack: SlackStandIn
    box: MailBox
    secrets: list[str]  # every credential made (none may appear in a trace)


@pytest.fixture
def served(backend, monkeypatch) -> Iterator[Served]:
    """The app served in this process: its spans reach this process's in-memory exporter.
    Refunds of 540.00 need two approvers, neither the requester."""
    port = free_port()
    stand_in, box = SlackStandIn(SLACK_TOKEN).start(), MailBox().start()
    env = {
        "WEBHOOK_SECRET": LOCAL_SECRET,
        "SEPARATION_OF_DUTIES": "true",
        "REFUND_QUORUM_AMOUNT": "500",
        "REFUND_QUORUM": "2",
        "SLACK_BOT_TOKEN": SLACK_TOKEN,
        "SLACK_SIGNING_SECRET": SLACK_SIGNING,
        "SLACK_CHANNEL": "C0APPROVALS",
        "SLACK_API_URL": stand_in.url,
        "SLACK_ACK_SECONDS": TEST_SERVER["SLACK_ACK_SECONDS"],  # the press's own answer
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(box.port),
        "SMTP_TLS": "none",
        "EMAIL_FROM": "Approvals <approvals@example.test>",
        "EMAIL_LINK_SECRET": LINK_SECRET,
        "PUBLIC_URL": f"http://127.0.0.1:{port}",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    app = create_app()
    try:
        with serve_app(app, port) as url:
            runner: Runner = app.state.runner
            keys = KeyStore(runner.store.db)
            raw = {
                "rita": keys.create("rita", parse_roles(["requester", "reviewer"]))[1],
                "alice": keys.create("alice", parse_roles(["reviewer"]), email=ALICE)[1],
            }
            headers = {n: {"authorization": f"Bearer {t}"} for n, t in raw.items()}
            secrets = [*raw.values(), SLACK_TOKEN, SLACK_SIGNING, LINK_SECRET]
            yield Served(Site(url, runner, headers), raw, stand_in, box, secrets)
    finally:
        stand_in.stop()
        box.stop()


def start(url: str, who: dict) -> dict:
    reply = loopback.post(
        f"{url}/runs", json={"input": A1004}, headers={**who, "traceparent": GIVEN}, timeout=60
    )
    assert reply.status_code == 201, reply.text
    assert reply.json()["status"] == "waiting"
    return reply.json()


def slack_press(s: Served, thread_id: str) -> httpx.Response:
    """Rita, linked to her Slack user both ways, presses Approve on the request's message."""
    link_slack(s.site.url, s.site.keys["rita"], "URITA", SLACK_SIGNING)

    def posted() -> list[dict]:
        return [
            m for m in s.slack.messages.values() if f'"t": "{thread_id}"' in str(m.get("blocks"))
        ]

    [message] = until(posted, "the request's Slack message")
    body, headers = signed_interaction(press(message, "approve", "URITA"), SLACK_SIGNING)
    url = f"{s.site.url}/slack/interactions"
    return loopback.post(url, content=body, headers=headers, timeout=30)


def email_approve(s: Served, thread_id: str) -> httpx.Response:
    """Alice opens her e-mail's Approve link, then posts its page's form."""
    message = s.box.wait_for(ALICE, thread_id)
    link = links(message)["approve"]
    page = loopback.get(link, headers={"accept": "text/html"}, timeout=30)
    assert page.status_code == 200, page.text
    token = parse_qs(urlparse(link).query)["token"][0]
    s.secrets.append(token)  # the link's token is a credential too
    return loopback.post(f"{s.site.url}/email/decide", data={"token": token}, timeout=30)


def langgraph_resume(s: Served, run: dict, who: str) -> str:
    """A resume from ``langgraph-sdk``'s own client, unmodified; the code it was refused with."""
    client = get_sync_client(url=f"{s.site.url}/lg", api_key=s.raw[who], timeout=30)
    resume = {"resume": {run["approval"]["interrupt_id"]: ACCEPT}}
    with pytest.raises(httpx.HTTPStatusError) as refused:
        client.runs.create(run["thread_id"], "refund", command=resume)
    return refused.value.response.json()["error"]["code"]


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
    text = repr([(s.name, s.attributes, s.events, s.resource) for s in spans])
    for secret in [*secrets, CANARY, LOCAL_SECRET, "Bearer"]:
        assert secret not in text
    assert "@" not in repr([(s.attributes, s.events) for s in spans])  # no address, no host


# each source: the route its request came in by, the credential that vouched, what was decided
ROUTES = {
    "slack": ("/slack/interactions", "slack", "refused", "duties"),
    "page": ("/inbox/requests/{thread_id}/decide", "session", "refused", "stale"),
    "webhook": ("/webhooks/{source}", "inbox_webhook", "refused", "duties"),
    "langgraph": ("/lg/threads/{thread_id}/runs", "api_key", "refused", "duties"),
    "api": ("/runs/{thread_id}/decision", "api_key", "refused", "stale"),
    "email": ("/email/decide", "email_link", "pending", None),
}


def test_a_run_is_one_trace_across_sources_the_pause_and_another_process(served, monkeypatch):
    s = served
    url, runner = s.site.url, s.site.runner
    with in_memory() as exporter:
        run = start(url, s.site.keys["rita"])
        thread_id, approval = run["thread_id"], run["approval"]
        stored = runner.store.db.one(
            "SELECT traceparent FROM runs WHERE thread_id = :t", {"t": thread_id}
        )
        assert stored["traceparent"].split("-")[1] == TRACE

        # each source through its own route, as a person or a system sends it
        pressed = slack_press(s, thread_id)  # rita asked for it: her own approval is refused
        assert pressed.status_code == 403 and pressed.json()["error"]["code"] == "duties"
        stale = typed("refused", Refusal.STALE)
        assert via_page(s.site, run, APPROVE, "alice", digest="0" * 32) == stale
        assert via_webhook(s.site, run, APPROVE, "rita") == typed("refused", Refusal.DUTIES)
        assert langgraph_resume(s, run, "rita") == "duties"
        assert via_api(s.site, run, APPROVE, "alice", digest="f" * 32) == stale
        mailed = email_approve(s, thread_id)  # the first of the two approvals
        assert mailed.status_code == 200 and mailed.json()["status"] == "approval recorded"
        # the second through the inbox command line, which hands the resume off; this app's
        # resumer is stopped first, so the hand-off waits for another process (the sweep)
        close_resumers(runner)
        answer(runner, approval["interrupt_id"], APPROVE, CAROL)
        assert runner.runs.get(thread_id).status == "resuming"
        local = from_sdk(exporter.get_finished_spans())

    with collector() as (endpoint, got):  # the sweep takes the hand-off up, in its own process
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "sweeper")
        run_cli("recover.py")
        assert runner.runs.get(thread_id).status == "done"
        assert got.requests and {c for _, c in got.requests} == {"application/x-protobuf"}
        remote = list(got.spans)

    spans = [x for x in local if x.trace_id == TRACE] + remote
    by_id = tree(spans)
    named: dict[str, list[Span]] = {}
    for x in spans:
        named.setdefault(x.name, []).append(x)

    server = named["POST /runs"][0]  # the request that started the run, the caller's child
    assert server.parent_id == CALLER
    root = named["approval_worker.start"][0]
    assert root.parent_id == server.span_id
    assert root.attributes["approval_worker.thread_id"] == thread_id
    assert named["approval_worker.segment"][0].parent_id == root.span_id

    # every attempt is a child of the run's root, linked to the request it came in (a trace
    # of its own), and says what its source is and how it was judged
    requests = {x.span_id: x for x in local if "url.path" in x.attributes}
    attempts = named["approval.decide"]
    assert all(a.parent_id == root.span_id for a in attempts)
    by_source = {a.attributes["approval.source"]: a for a in attempts}
    assert set(by_source) == {*ROUTES, "cli"}
    for source, (path, provenance, outcome, reason) in ROUTES.items():
        attempt = by_source[source]
        said = attempt.attributes
        [came_in] = [requests[link] for link in attempt.links]
        assert came_in.trace_id != TRACE and came_in.parent_id is None
        assert came_in.attributes["http.route"] == path, (source, came_in.attributes)
        assert came_in.name == f"POST {path}"  # named by its route, as HTTP spans are
        assert came_in.attributes["http.request.method"] == "POST"
        assert said["approval.provenance"] == provenance, source
        assert said["approval.outcome"] == outcome, source
        assert said.get("approval.refusal.reason") == reason, source
        assert said["approval.interrupt_id"] == approval["interrupt_id"]
        assert said["approval_worker.thread_id"] == thread_id
    assert list(by_source["slack"].attributes["approval.approver_id"]) == ["rita"]
    assert by_source["page"].attributes["approval.request_digest"] == "0" * 32  # what it saw
    emailed = by_source["email"].attributes
    assert emailed["approval.quorum"] == 2 and emailed["approval.quorum.approvals"] == 1
    assert list(emailed["approval.approver_id"]) == ["alice"]

    applied = by_source["cli"].attributes
    assert applied["approval.outcome"] == "applied" and applied["approval.status"] == "approved"
    assert applied["approval.provenance"] == "cli"
    hidden = "sha256:" + hashlib.sha256(CAROL.encode()).hexdigest()[:16]
    assert sorted(applied["approval.approver_id"]) == sorted(["alice", hidden])
    assert applied["approval.request_digest"] == approval["digest"]
    paused = named["approval_worker.segment"][0]  # the segment that paused says what it asks
    requested = dict(paused.events)["approval.requested"]
    assert requested["approval.amount"] == "540.00" and requested["approval.currency"] == "EUR"
    assert requested["approval.request_digest"] == approval["digest"]
    claim = named["approval.claim"][0]
    assert claim.parent_id == by_source["cli"].span_id
    [pause] = named["approval.pause"]
    assert pause.parent_id == root.span_id and pause.attributes["approval.status"] == "approved"
    assert pause.attributes["approval.amount"] == "540.00"
    assert pause.attributes["approval.currency"] == "EUR"
    assert pause.attributes["approval.quorum"] == 2
    assert pause.attributes["approval.request_digest"] == approval["digest"]
    assert pause.attributes["approval.wait_seconds"] >= 0 and pause.end_ns >= pause.start_ns

    # the resume ran in the sweeper, under the run's root, and the refund under the resume
    resume = named["approval_worker.resume"][0]
    assert resume in remote and resume.parent_id == root.span_id
    assert resume.resource["service.name"] == "sweeper"
    assert resume.resource["process.pid"] != os.getpid()
    segment = next(x for x in remote if x.name == "approval_worker.segment")
    assert segment.parent_id == resume.span_id
    refund = named["execute_tool issue_refund"][0]
    assert refund in remote and by_id[refund.parent_id] == segment
    assert refund.attributes["approval_worker.tool.acted"] is True
    no_secret_in(local + remote, s.secrets)


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
        # the product's default: the resume runs in a resumer process, so the trace crosses it
        env = worker_env(db_env, **otel, OTEL_SERVICE_NAME="served", RESUME_PROCESSES="1")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(tmp_path / "serve.log", "w") as log:
            serve = zygote.popen(
                [COMMAND, "serve", "--port", str(port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
            )
        try:
            # start-up waits for its resumer process: minutes on a loaded machine
            until(lambda: healthy(url), "approval-worker serve answers /healthz", timeout=240)
            rita = api_key(db_env, "rita", "requester")
            alice = api_key(db_env, "alice", "reviewer")
            run = started(url, rita, GIVEN)
            approval = run["approval"]
            decided = loopback.post(
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

            other = started(url, rita, second, "Refund order A-1002: it leaks")
        finally:
            serve.terminate()
            serve.wait(timeout=30)
        # a decision handed off while no app runs (the inbox command line): recover takes it
        with pointed_at(db_env), open_store() as store:
            answer(Runner(store), other["approval"]["interrupt_id"], APPROVE, "alice")
        recover = zygote.run(
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


def started(url: str, who: dict, traceparent: str, text: str = A1004) -> dict:
    headers = {**who, "traceparent": traceparent}
    reply = loopback.post(f"{url}/runs", json={"input": text}, headers=headers, timeout=60)
    assert reply.status_code == 201 and reply.json()["status"] == "waiting", reply.text
    return reply.json()


def healthy(url: str) -> bool:
    try:
        return loopback.get(f"{url}/healthz", timeout=2).status_code == 200
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
