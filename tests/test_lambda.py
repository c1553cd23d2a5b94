"""The Lambda entry points, invoked with AWS's own event shapes (API Gateway HTTP API v2, Function
URL, EventBridge schedule), each in a fresh process: every invocation is a cold start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from conftest import ROOT

from testkit.lambdas import HEAVY, invoke
from testkit.webapp import SECRET, answered_event, api_key, approve_item, sign
from worker.runner import Runner


def waiting(runner: Runner, thread_id: str) -> str:
    outcome = runner.start("Refund order A-1001: arrived broken", thread_id=thread_id)
    assert outcome.status == "waiting", outcome
    return outcome.interrupt_id


def test_signed_delivery_resumes_to_done_before_the_handler_returns(runner: Runner):
    interrupt_id = waiting(runner, "t-lambda")
    body = answered_event(interrupt_id, "t-lambda", [approve_item()])
    headers = sign(body, msg_id="msg_lambda_1")

    first = invoke("handler", "apigw_v2_http_api.json", body, headers)
    answer = first["answer"]
    assert answer["statusCode"] == 200, answer
    reply = json.loads(answer["body"])
    assert reply["status"] == "done" and reply["thread_id"] == "t-lambda", reply
    assert reply["result"].startswith("Refunded"), reply
    assert runner.runs.get("t-lambda").status == "done"  # before the function was frozen

    # Svix redelivers (same svix-id), here through a Function URL: acknowledged, and the cold
    # start loaded nothing of LangGraph, LangChain or the model SDK.
    again = invoke("handler", "function_url.json", body, sign(body, msg_id="msg_lambda_1"))
    assert again["answer"]["statusCode"] == 200
    assert json.loads(again["answer"]["body"])["status"] == "ignored"
    assert again["heavy"] == [], again["heavy"]
    assert first["collecting"] and again["collecting"]  # paused for the cold start only

    forged = invoke("handler", "function_url.json", body, sign(body, secret=SECRET[:-4] + "AAA="))
    assert forged["answer"]["statusCode"] == 400
    assert json.loads(forged["answer"]["body"])["error"]["code"] == "bad_signature"
    assert forged["heavy"] == []

    unknown = answered_event(interrupt_id, "t-nobody", [approve_item()])
    stray = invoke("handler", "apigw_v2_http_api.json", unknown, sign(unknown, msg_id="msg_u"))
    assert json.loads(stray["answer"]["body"])["status"] == "ignored"
    assert stray["heavy"] == []


def test_a_resume_past_the_budget_answers_202_and_the_scheduled_pass_finishes_it(
    runner: Runner,
):
    interrupt_id = waiting(runner, "t-slow")
    body = answered_event(interrupt_id, "t-slow", [approve_item()])
    slow = {"FAULTS": "resume.start=sleep:3", "RESUME_BUDGET_SECONDS": "1", "LEASE_SECONDS": "1"}

    first = invoke("handler", "apigw_v2_http_api.json", body, sign(body, msg_id="msg_s"), **slow)
    assert first["answer"]["statusCode"] == 202, first
    assert json.loads(first["answer"]["body"])["status"] == "accepted"
    # The process ended after answering (as a frozen function would): the run stays claimed.
    run = runner.runs.get("t-slow")
    assert run.status == "resuming"
    while runner.clock() <= run.lease_until:  # wait out the lease, as the schedule would
        time.sleep(0.2)  # the lease ends by real time in the frozen function's run

    swept = invoke("scheduled", "eventbridge_schedule.json")["answer"]
    assert swept["counts"] == {"done": 1} and swept["threads"] == {"done": ["t-slow"]}, swept
    assert swept["failed"] == 0
    assert runner.runs.get("t-slow").status == "done"

    idle = invoke("scheduled", "eventbridge_schedule.json")["answer"]
    assert idle == {"handled": 0, "counts": {}, "threads": {}, "failed": 0}


def test_decision_api_resumes_inline_in_serverless_mode(runner: Runner):
    interrupt_id = waiting(runner, "t-api")
    digest = runner.runs.get("t-api").request_digest
    body = json.dumps(
        {"interrupt_id": interrupt_id, "digest": digest, "decisions": [{"type": "approve"}]}
    )
    db_env = {k: os.environ[k] for k in ("DATABASE_URL", "SQLITE_PATH") if k in os.environ}
    json_headers = {"content-type": "application/json", **api_key(db_env, "bob", "reviewer")}
    path = "/runs/t-api/decision"
    done = invoke("handler", "apigw_v2_http_api.json", body, json_headers, path)["answer"]
    assert done["statusCode"] == 200, done
    assert json.loads(done["body"])["status"] == "done"
    assert runner.runs.get("t-api").status == "done"
    stale = invoke("handler", "apigw_v2_http_api.json", body, json_headers, path)
    assert stale["answer"]["statusCode"] == 409, stale
    assert stale["heavy"] == []


def test_nothing_heavy_is_imported_by_the_worker_inbox_and_api_modules():
    """LangGraph, LangChain and the model SDK load only when a graph runs."""
    modules = sorted(
        f"{p.parent.name}.{p.stem}"
        for package in ("api", "worker", "inbox", "store", "core")
        for p in (ROOT / package).glob("*.py")
        if p.stem != "__main__"
    )
    code = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


def test_the_collector_paused_for_a_cold_start_is_back_once_a_graph_is_built(runner: Runner):
    """``run.py`` starts without the cyclic garbage collector (``core.coldstart``); the run's
    segment, which may be long, runs with it."""
    import gc

    from core import coldstart
    from worker.graphs import Graphs

    coldstart.pause()
    try:
        assert not gc.isenabled()
        Graphs(runner.store).graph("refund")
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
