"""Decision-time metrics after real runs, on both backends: two refunds decided 5 and 15 minutes
after they were asked, one refund and one purchase order still open (the latter overdue). The
figures come from the database, so the app's ``/metrics`` (another process) reports the same
histogram buckets and gauges as this process computes, and the operators' page shows p50/p95;
other roles are refused the page."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from ops import decision_times
from ops.metrics import DatabaseGauges, render
from testkit import loopback
from testkit.decide import claim
from testkit.loop import sign_in
from testkit.webapp import api_key, start_server, worker_env
from worker.runner import Runner

METRICS_TOKEN = "mtok-decision-times-0042"
PO_REQUEST = "Order 4 toner cartridges for CC-100: the printers are empty"
REJECT = {"decisions": [{"type": "reject", "message": "not this time"}]}


@pytest.fixture
def scene(store):
    """The runs, written through a runner whose clock starts two hours ago."""
    base = time.time() - 7200
    now = [base]
    runner = Runner(store, clock=lambda: now[0])
    for thread_id, minutes in (("dt-fast", 5), ("dt-slow", 15)):
        now[0] = base
        paused = runner.start("Refund order A-1001: the kettle arrived broken", thread_id=thread_id)
        assert paused.status == "waiting"
        now[0] = base + minutes * 60
        applied = claim(runner, thread_id, paused.interrupt_id, REJECT, by="bob")
        assert runner.resume_claimed(applied.run).status == "done"
    now[0] = base
    assert runner.start("Refund order A-1002: wrong size", thread_id="dt-open").status == "waiting"
    now[0] = base + 1800  # asked 1.5 h ago, with 10 minutes to decide: overdue
    po = runner.start(PO_REQUEST, thread_id="dt-po", workflow="purchase-order", expires_in="10m")
    assert po.status == "waiting"
    return base


def test_decision_times_are_read_from_the_runs(store, scene):
    flows = decision_times.read(store, scene + 7200)
    refund, po = flows["refund"], flows["purchase-order"]
    assert (refund.requested, sorted(refund.to_decision)) == (3, [300.0, 900.0])
    assert sorted(refund.to_done) == [300.0, 900.0]
    assert refund.stats("to_decision") == {"p50": 300.0, "p95": 900.0}
    assert refund.open_by_age == {"0-1h": 0, "1h-4h": 1, "4h-1d": 0, "1d-3d": 0, "3d+": 0}
    assert (refund.overdue, po.overdue, po.open_by_age["1h-4h"], po.to_decision) == (0, 1, 1, [])

    text = render(DatabaseGauges(store, clock=lambda: scene + 7200)).decode()
    bucket = 'approval_request_to_decision_seconds_bucket{le="%s",workflow="refund"} %s'
    assert bucket % ("60.0", "0.0") in text
    assert bucket % ("300.0", "1.0") in text and bucket % ("900.0", "2.0") in text
    assert 'approval_request_to_decision_seconds_gsum{workflow="refund"} 1200.0' in text
    assert 'approval_request_to_done_seconds_gcount{workflow="refund"} 2.0' in text
    assert 'approval_open_requests{age="1h-4h",workflow="purchase-order"} 1.0' in text
    assert 'approval_overdue_requests{workflow="purchase-order"} 1.0' in text


def test_metrics_and_the_operators_page_from_another_process(store, scene, tmp_path):
    db_env = {k: os.environ[k] for k in ("DATABASE_URL", "SQLITE_PATH") if k in os.environ}
    server = start_server(worker_env(db_env, METRICS_TOKEN=METRICS_TOKEN), tmp_path / "server.log")
    try:
        reply = loopback.get(
            f"{server.url}/metrics",
            headers={"authorization": f"Bearer {METRICS_TOKEN}"},
            timeout=30,
        )
        assert reply.status_code == 200
        text = reply.text
        assert (
            'approval_request_to_decision_seconds_bucket{le="300.0",workflow="refund"} 1.0' in text
        )
        assert 'approval_request_to_done_seconds_bucket{le="+Inf",workflow="refund"} 2.0' in text
        assert 'approval_open_requests{age="1h-4h",workflow="refund"} 1.0' in text
        assert 'approval_overdue_requests{workflow="purchase-order"} 1.0' in text

        olga = sign_in(server.url, api_key(db_env, "olga", "operator"))
        page = loopback.get(
            f"{server.url}/inbox/decision-times", cookies={"aw_session": olga.cookie}, timeout=30
        )
        assert page.status_code == 200
        row = page.text.split('data-workflow="refund"')[1].split("</tr>")[0]
        assert '"p50-decision">5 min<' in row and '"p95-decision">15 min<' in row
        assert '"p50-done">5 min<' in row and '"open">1<' in row
        po = page.text.split('data-workflow="purchase-order"')[1].split("</tr>")[0]
        assert '"overdue">1<' in po and '"p50-decision">-<' in po

        rita = api_key(db_env, "rita", "reviewer")
        with httpx.Client(base_url=server.url, timeout=30) as client:
            login = client.get("/inbox/login")
            token = login.text.split('name="csrf" value="')[1].split('"')[0]
            credential = rita["authorization"].split(" ", 1)[1]
            client.post(
                "/inbox/login", data={"csrf": token, "next": "/inbox", "credential": credential}
            )
            refused = client.get("/inbox/decision-times")
        assert refused.status_code == 403 and "needs an operator" in refused.text
        assert "p50" not in refused.text
    finally:
        server.stop()
