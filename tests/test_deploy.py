"""The recipes in ``deploy/`` run as written: each test reads the file, takes the command it
contains, and runs it against a fresh database on which an approved run waits to be resumed.
Only the install directory (``/srv/approval-worker``; the image's ``approval-worker`` on
``PATH``) is pointed at this checkout's install (``.venv``), and the state and log directories at
temporary ones. The image itself is built in ``test_image.py``; the manifests are checked
against the Kubernetes schemas and the units' hardening by ``systemd-analyze security`` here."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from agent.ledger import Ledger
from testkit import zygote
from testkit.databases import settings_to_clear
from testkit.decide import answer
from testkit.lambdas import invoke
from testkit.recipes import containers as recipe_containers
from testkit.recipes import kustomize
from testkit.servers import stop_process
from testkit.webapp import SECRET, api_key
from worker.runner import Runner

DEPLOY = ROOT / "deploy"
APP_DIR = "/srv/approval-worker"
STATE_DIR = "/var/lib/approval-worker"
VENV_BIN = ROOT / ".venv" / "bin"

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # recipes, not backends


def approved(runner: Runner, thread_id: str) -> None:
    Ledger(runner.store.db).clear()  # each run refunds A-1001 in full
    paused = runner.start("Refund order A-1001: arrived broken", thread_id=thread_id)
    assert paused.status == "waiting", paused
    answer(runner, paused.interrupt_id, [{"type": "approve"}], "alice")


def env() -> dict[str, str]:
    """The process environment with this test's database settings, as the recipe's .env or
    Secret would supply them."""
    keep = {k: v for k, v in os.environ.items() if k not in settings_to_clear()}
    path = f"{VENV_BIN}:{keep.get('PATH', '')}"  # the image's PATH holds the installed command
    return {**keep, **_db(), "WEBHOOK_SECRET": SECRET, "PATH": path}


def _db() -> dict[str, str]:
    return {k: os.environ[k] for k in ("SQLITE_PATH", "DATABASE_URL") if k in os.environ}


def wait_done(runner: Runner, thread_id: str, proc: subprocess.Popen, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while runner.runs.get(thread_id).status != "done":
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{thread_id} not done"
        time.sleep(0.2)  # polls until the run is done (deadline above)


@SQLITE
def test_crontab_line_sweeps(runner: Runner, tmp_path: Path):
    [line] = [ln for ln in (DEPLOY / "crontab").read_text().splitlines() if ln and ln[0] != "#"]
    fields = line.split(None, 5)
    assert fields[:5] == ["*"] * 5  # every minute
    command = fields[5].replace(APP_DIR, str(ROOT)).replace(STATE_DIR, str(tmp_path))
    command = command.replace("/var/log/approval-worker", str(tmp_path))
    assert "uv run" not in command and "--retry-failed" in command
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


def exec_start(service: configparser.SectionProxy) -> list[str]:
    command = shlex.split(service["ExecStart"].replace(APP_DIR, str(ROOT)))
    assert command[0] == str(VENV_BIN / "approval-worker"), command  # installed, not `uv run`
    return command


@SQLITE
def test_systemd_timer_starts_the_one_pass_service(runner: Runner, tmp_path: Path):
    timer = unit("approval-recover.timer")
    assert timer["Timer"]["OnCalendar"] == "*-*-* *:*:00"  # every minute
    assert timer["Install"]["WantedBy"] == "timers.target"
    service = unit("approval-recover.service")["Service"]
    assert service["Type"] == "oneshot"
    assert service["WorkingDirectory"] == STATE_DIR
    approved(runner, "t-timer")
    proc = subprocess.run(exec_start(service), cwd=tmp_path, env=env(), timeout=120)
    assert proc.returncode == 0
    assert runner.runs.get("t-timer").status == "done"


@SQLITE
def test_systemd_sweeper_service_sweeps_until_stopped(runner: Runner, tmp_path: Path):
    service = unit("approval-sweeper.service")["Service"]
    assert service["Restart"] == "always"
    proc = subprocess.Popen(exec_start(service), cwd=tmp_path, env=env())
    try:
        approved(runner, "t-service")  # answered while the service already runs
        wait_done(runner, "t-service", proc)
        approved(runner, "t-service-2")  # nothing was unfinished in between: it kept going
        wait_done(runner, "t-service-2", proc)
    finally:
        stop_process(proc)


@SQLITE
def test_systemd_anchor_service_anchors_and_witnesses(runner: Runner, tmp_path: Path, anchor_keys):
    """The anchor job's unit: its key arrives as a credential (here: the file the credential
    would be), it signs an anchor over the waiting run and appends it to the witness."""
    service = unit("approval-anchor.service")["Service"]
    assert service["LoadCredential"].startswith("anchor.key:")
    approved(runner, "t-anchor")
    witness = tmp_path / "anchors.witness"
    extra = {
        "AUDIT_SIGNING_KEY_FILE": str(anchor_keys.key_path),
        "AUDIT_WITNESS_FILE": str(witness),
    }
    proc = subprocess.Popen(exec_start(service), cwd=tmp_path, env={**env(), **extra})
    try:
        deadline = time.monotonic() + 90
        while not (witness.exists() and witness.read_text().strip()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no anchor witnessed"
            time.sleep(0.2)  # polls until the first anchor is witnessed (deadline above)
    finally:
        stop_process(proc)
    first = json.loads(witness.read_text().splitlines()[0])
    assert first["kid"] == anchor_keys.signer.kid and first["seq"] == 1
    assert "t-anchor" in [h[0] for h in first["heads"]]


def container(doc: dict) -> dict:
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    [only] = spec["template"]["spec"]["containers"]
    return only


@SQLITE
def test_kubernetes_cronjob_runs_one_pass(runner: Runner, tmp_path: Path):
    [job] = yaml.safe_load_all((DEPLOY / "kubernetes" / "cron" / "cronjob.yaml").read_text())
    assert job["kind"] == "CronJob" and job["spec"]["schedule"] == "* * * * *"
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    recover = container(job)
    assert recover["command"][:3] == ["approval-worker", "recover", "--retry-failed"]
    approved(runner, "t-k8s-cron")
    proc = subprocess.run(recover["command"], cwd=tmp_path, env=env(), timeout=120)
    assert proc.returncode == 0
    assert runner.runs.get("t-k8s-cron").status == "done"


def manifests() -> list[tuple[str, dict]]:
    """What a cluster is given: the production overlay rendered (its image set), the CronJob
    variant with the same image, and the examples."""
    kube = DEPLOY / "kubernetes"
    overlay = kustomize(kube / "overlays" / "production")
    [image] = {box["image"] for box in recipe_containers(overlay)}
    cron = kustomize(kube / "cron")
    for box in recipe_containers(cron):
        box["image"] = image
    examples = [
        doc for path in sorted(kube.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
    ]
    return [(f"{doc['kind']}/{doc['metadata']['name']}", doc) for doc in overlay + cron + examples]


def test_kubernetes_manifests_match_the_kubernetes_schemas():
    import kubernetes_validate

    found = manifests()
    kinds = {doc["kind"] for _, doc in found}
    assert {"Deployment", "Service", "Ingress", "Secret", "CronJob"} <= kinds
    assert "PodDisruptionBudget" in kinds
    for name, doc in found:  # offline: the schemas ship with the package; unknown fields fail
        kubernetes_validate.validate(doc, "1.33.0", strict=True)
        for box in _containers(doc):
            assert not box["image"].endswith(":latest"), name
            assert box["command"][0] == "approval-worker", name
            assert box["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert box["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert "limits" in box["resources"] and "requests" in box["resources"], name
    broken = dict(found[0][1], spec={"replicaz": 1})  # the check can fail
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.33.0", strict=True)


def _containers(doc: dict) -> list[dict]:
    if doc["kind"] not in ("Deployment", "CronJob", "Job"):
        return []
    return recipe_containers([doc])


@pytest.mark.parametrize(
    "name",
    [
        "approval-recover.service",
        "approval-sweeper.service",
        "approval-webhook.service",
        "approval-anchor.service",
    ],
)
def test_systemd_units_are_hardened(name: str):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here (Debian package systemd)")
    done = subprocess.run(
        [
            "systemd-analyze",
            "security",
            "--offline=yes",
            "--no-pager",
            str(DEPLOY / "systemd" / name),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", done.stdout)
    assert found, done.stdout[-2000:] + done.stderr
    assert found.group(2) in ("OK", "MEDIUM") and float(found.group(1)) <= 6.9, found.group(0)


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
    # the allow-listed stage deploy/aws/stage.py writes (tests/test_lambda_build.py builds it)
    assert template["Globals"]["Function"]["CodeUri"] == "../../dist/lambda"

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
    proc = zygote.run(
        [sys.executable, str(ROOT / "recover.py"), "--wait", "--forever"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: choose one of --wait")
