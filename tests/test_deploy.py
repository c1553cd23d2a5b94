"""The recipes in ``deploy/`` run as written: each test reads the file, takes the command it
contains, and runs it against a fresh database on which an approved run waits to be resumed.
Only the install directory (``/srv/approval-worker``, the image's ``/app``) is pointed at this
checkout, and the log directory at a temporary one."""

from __future__ import annotations

import configparser
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import ROOT
from servers import SECRET, api_key, free_port
from test_lambda import invoke

from testkit.databases import settings_to_clear
from testkit.decide import answer
from worker.runner import Runner

DEPLOY = ROOT / "deploy"
APP_DIR = "/srv/approval-worker"

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # recipes, not backends


def approved(runner: Runner, thread_id: str) -> None:
    paused = runner.start("Refund order A-1001: arrived broken", thread_id=thread_id)
    assert paused.status == "waiting", paused
    answer(runner, paused.interrupt_id, [{"type": "approve"}], "alice")


def env() -> dict[str, str]:
    """The process environment with this test's database settings, as the recipe's .env or
    Secret would supply them."""
    keep = {k: v for k, v in os.environ.items() if k not in settings_to_clear()}
    return {**keep, **_db(), "WEBHOOK_SECRET": SECRET}


def _db() -> dict[str, str]:
    return {k: os.environ[k] for k in ("SQLITE_PATH", "DATABASE_URL") if k in os.environ}


def wait_done(runner: Runner, thread_id: str, proc: subprocess.Popen, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while runner.runs.get(thread_id).status != "done":
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{thread_id} not done"
        time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@SQLITE
def test_crontab_line_sweeps(runner: Runner, tmp_path: Path):
    [line] = [ln for ln in (DEPLOY / "crontab").read_text().splitlines() if ln and ln[0] != "#"]
    fields = line.split(None, 5)
    assert fields[:5] == ["*"] * 5  # every minute
    command = fields[5].replace(APP_DIR, str(ROOT))
    command = command.replace("/var/log/approval-worker", str(tmp_path))
    approved(runner, "t-cron")
    proc = subprocess.run(["sh", "-c", command], env=env(), timeout=120)
    assert proc.returncode == 0
    assert runner.runs.get("t-cron").status == "done"
    assert "t-cron  Refunded" in (tmp_path / "recover.log").read_text()


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(DEPLOY / "systemd" / name)
    return parser


@SQLITE
def test_systemd_timer_starts_the_one_pass_service(runner: Runner):
    timer = unit("approval-recover.timer")
    assert timer["Timer"]["OnCalendar"] == "*-*-* *:*:00"  # every minute
    assert timer["Install"]["WantedBy"] == "timers.target"
    service = unit("approval-recover.service")["Service"]
    assert service["Type"] == "oneshot"
    cwd = service["WorkingDirectory"].replace(APP_DIR, str(ROOT))
    approved(runner, "t-timer")
    proc = subprocess.run(shlex.split(service["ExecStart"]), cwd=cwd, env=env(), timeout=120)
    assert proc.returncode == 0
    assert runner.runs.get("t-timer").status == "done"


@SQLITE
def test_systemd_sweeper_service_sweeps_until_stopped(runner: Runner):
    service = unit("approval-sweeper.service")["Service"]
    assert service["Restart"] == "always"
    cwd = service["WorkingDirectory"].replace(APP_DIR, str(ROOT))
    proc = subprocess.Popen(shlex.split(service["ExecStart"]), cwd=cwd, env=env())
    try:
        approved(runner, "t-service")  # answered while the service already runs
        wait_done(runner, "t-service", proc)
        approved(runner, "t-service-2")  # nothing was unfinished in between: it kept going
        wait_done(runner, "t-service-2", proc)
    finally:
        stop(proc)


def container(doc: dict) -> dict:
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    [only] = spec["template"]["spec"]["containers"]
    return only


@SQLITE
def test_kubernetes_cronjob_runs_one_pass(runner: Runner):
    [job] = yaml.safe_load_all((DEPLOY / "kubernetes" / "cronjob.yaml").read_text())
    assert job["kind"] == "CronJob" and job["spec"]["schedule"] == "* * * * *"
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    recover = container(job)
    approved(runner, "t-k8s-cron")
    proc = subprocess.run(recover["command"], cwd=ROOT, env=env(), timeout=120)
    assert proc.returncode == 0
    assert runner.runs.get("t-k8s-cron").status == "done"


@SQLITE
def test_kubernetes_deployments_serve_webhooks_and_sweep(runner: Runner):
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "deployment.yaml").read_text()))
    by_name = {d["metadata"]["name"]: container(d) for d in docs if d["kind"] == "Deployment"}
    web = by_name["approval-webhook"]["command"]
    port = free_port()
    web = [str(port) if arg == "8000" else arg for arg in web]  # a free port on this machine
    web = [("127.0.0.1" if arg == "0.0.0.0" else arg) for arg in web]
    server = subprocess.Popen(web, cwd=ROOT, env=env())
    sweeper = subprocess.Popen(by_name["approval-sweeper"]["command"], cwd=ROOT, env=env())
    try:
        approved(runner, "t-k8s")
        wait_done(runner, "t-k8s", sweeper)
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert health.status_code == 200
        ops = api_key(_db(), "ops", "operator")
        view = httpx.get(f"http://127.0.0.1:{port}/runs/t-k8s", headers=ops).json()
        assert view["status"] == "done"
    finally:
        stop(server)
        stop(sweeper)


@SQLITE
def test_sam_template_handlers_answer_their_events(runner: Runner):
    template = yaml.safe_load((DEPLOY / "aws" / "template.yaml").read_text())
    functions = template["Resources"]
    http = functions["HttpFunction"]["Properties"]
    sweep = functions["SweepFunction"]["Properties"]
    assert http["Handler"] == "lambda_handler.handler"
    assert http["Events"]["Api"]["Type"] == "HttpApi" and "FunctionUrlConfig" in http
    assert http["Timeout"] > float(
        template["Globals"]["Function"]["Environment"]["Variables"]["RESUME_BUDGET_SECONDS"]
    )
    assert sweep["Events"]["EveryMinute"]["Type"] == "Schedule"
    assert sweep["Handler"] == "lambda_handler.scheduled"
    assert (ROOT / template["Globals"]["Function"]["CodeUri"].replace("../..", ".")).is_dir()

    approved(runner, "t-sam")
    entry = sweep["Handler"].split(".")[1]
    swept = invoke(entry, "eventbridge_schedule.json")["answer"]
    assert swept["threads"] == {"done": ["t-sam"]}, swept
    entry = http["Handler"].split(".")[1]
    ops = api_key(_db(), "ops", "operator")
    got = invoke(entry, "apigw_v2_http_api.json", headers=ops, path="/runs/t-sam", method="GET")
    got = got["answer"]
    assert got["statusCode"] == 200 and json.loads(got["body"])["status"] == "done", got


def test_recover_forever_and_wait_are_exclusive():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "recover.py"), "--wait", "--forever"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: choose one of --wait")
