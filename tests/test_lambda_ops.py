"""The Lambda HTTP function as an operator sees it: a database down at the cold start answers
503 in the app's error shape (not a function error, which API Gateway turns into a bare 500),
and each request is logged once although the runtime has its own handler on the root logger."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from testkit.databases import ROOT
from testkit.lambdas import CHILD, EVENTS, invoke
from testkit.webapp import LOCAL_SECRET, free_port

# what the Lambda Python runtime's bootstrap does before importing the handler
RUNTIME_LOGGING = "import logging, sys; logging.getLogger().addHandler(logging.StreamHandler())\n"


def test_a_database_down_at_the_cold_start_answers_503():
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/test"
    got = invoke(
        "handler",
        "apigw_v2_http_api.json",
        path="/runs",
        method="GET",
        DATABASE_URL=closed,
        DATABASE_CONNECT_TIMEOUT="1",
    )["answer"]
    assert got["statusCode"] == 503, got
    assert json.loads(got["body"])["error"]["code"] == "unavailable"
    assert got["headers"]["retry-after"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_each_request_is_logged_once(backend):
    spec = {"entry": "handler", "event": str(EVENTS / "apigw_v2_http_api.json"), "headers": {}}
    spec.update(body=None, path="/healthz", method="GET", heavy=[])
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WEBHOOK_SECRET": LOCAL_SECRET,
        "AWS_LAMBDA_FUNCTION_NAME": "approval-worker-http",
        "LOG_FORMAT": "json",
    }
    proc = subprocess.run(
        [sys.executable, "-c", RUNTIME_LOGGING + CHILD, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "/healthz" in line]
    assert len(lines) == 1, proc.stderr
    assert json.loads(lines[0])["status"] == 200
