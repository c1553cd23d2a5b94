"""The Kubernetes recipe as a cluster runs it: the production overlay rendered (image set once),
the grace period sized to the drain, and the Pods started with exactly the environment the
manifests declare (the image's ENV, the Secret, the container's env; no variable of this test's
own), on a read-only root with the declared volumes, answering a signed
delivery, a scrape and their probes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import ROOT

from agent.ledger import Ledger
from core import settings
from testkit import loopback
from testkit.recipes import (
    containers,
    image_env,
    kubectl_kustomize,
    kustomize,
    pod_spec,
    sandbox,
    volume,
)
from testkit.wait import until
from testkit.webapp import LOCAL_SECRET, approve_item, free_port, sign
from worker.runner import Runner

KUBE = ROOT / "deploy" / "kubernetes"
OVERLAY = KUBE / "overlays" / "production"
IMAGE = "registry.example.com/approval-worker:0.2.0"
METRICS_TOKEN = "scrape-token-for-the-recipe-test"
POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)  # what it targets


def _key(doc: dict) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def workloads(docs: list[dict]) -> dict[str, dict]:
    kinds = ("Deployment", "Job", "CronJob")
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] in kinds}


def test_the_overlay_sets_the_image_once_for_every_workload():
    docs = kustomize(OVERLAY)
    assert {box["image"] for box in containers(docs)} == {IMAGE}
    assert {("Deployment", "approval-webhook"), ("Deployment", "approval-sweeper")} <= {
        _key(d) for d in docs
    }
    assert {("Job", "approval-migrate"), ("PodDisruptionBudget", "approval-webhook")} <= {
        _key(d) for d in docs
    }
    named = [p for p in KUBE.rglob("*.yaml") if "registry.example.com" in p.read_text()]
    assert named == [OVERLAY / "kustomization.yaml"]  # the only place the image is named
    theirs = kubectl_kustomize(OVERLAY)
    if theirs is not None:  # kubectl's rendering agrees with the suite's
        assert sorted(theirs, key=_key) == sorted(docs, key=_key)


def test_grace_periods_cover_the_pre_stop_and_the_drain():
    drain = float(settings.SHUTDOWN_SECONDS.default or 0)
    secret = yaml.safe_load((KUBE / "secret.example.yaml").read_text())["stringData"]
    drain = float(secret.get("SHUTDOWN_SECONDS", drain))
    for doc in kustomize(OVERLAY):
        if doc["kind"] != "Deployment":
            continue
        spec = pod_spec(doc)
        [box] = spec["containers"]
        pre_stop = box.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        assert spec["terminationGracePeriodSeconds"] >= pre_stop + drain + 5, _key(doc)
        assert spec["enableServiceLinks"] is False  # no *_SERVICE_HOST beside the settings
        assert "livenessProbe" in box, _key(doc)


def pod_env(box: dict, secret: dict[str, str], volumes: dict[str, Path]) -> dict[str, str]:
    """What the kubelet gives the container: the image's ENV (its PATH pointing at this
    checkout's install), the Secret (envFrom), the container's env, and what Kubernetes always
    adds; a value under a volume's mount path points at the volume's local directory."""
    env = image_env()
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    env.update(HOME="/nonexistent", HOSTNAME=box["name"])
    env.update(
        KUBERNETES_SERVICE_HOST="127.0.0.1",
        KUBERNETES_SERVICE_PORT="443",
        KUBERNETES_PORT="tcp://127.0.0.1:443",
    )
    assert [s["secretRef"]["name"] for s in box["envFrom"]] == ["approval-worker"]
    env.update(secret)
    env.update({e["name"]: e["value"] for e in box.get("env", [])})
    # PATH names this checkout's install, not a path in the Pod: never remapped to a volume
    # (a checkout under /tmp would otherwise land in the emptyDir's directory)
    return {k: v if k == "PATH" else _mapped(v, box, volumes) for k, v in env.items()}


def _mapped(value: str, box: dict, volumes: dict[str, Path]) -> str:
    for mount in box.get("volumeMounts", []):
        if value == mount["mountPath"] or value.startswith(mount["mountPath"] + "/"):
            return str(volumes[mount["name"]]) + value[len(mount["mountPath"]) :]
    return value


def start(doc: dict, secret: dict[str, str], base: Path, port: int) -> tuple:
    spec = pod_spec(doc)
    [box] = spec["containers"]
    name = doc["metadata"]["name"]
    volumes = {v["name"]: volume(base, f"{name}-{v['name']}") for v in spec.get("volumes", [])}
    env = pod_env(box, secret, volumes)
    command = [{"0.0.0.0": "127.0.0.1", "8000": str(port)}.get(arg, arg) for arg in box["command"]]
    log = open(base / f"{doc['metadata']['name']}.log", "w")  # noqa: SIM115 - until stopped
    proc = subprocess.Popen(
        command, cwd=base / "root", env=env, stdout=log, stderr=subprocess.STDOUT
    )
    return proc, box, env, volumes


def stop(proc: subprocess.Popen) -> int:
    proc.terminate()
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


@POSTGRES
def test_the_pods_answer_a_signed_delivery_a_scrape_and_their_probes(runner: Runner):
    docs = workloads(kustomize(OVERLAY))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    secret = yaml.safe_load((KUBE / "secret.example.yaml").read_text())["stringData"]
    secret = {  # the placeholders an operator replaces, replaced by this test's
        **secret,
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "WEBHOOK_SECRET": LOCAL_SECRET,
        "WEBHOOK_URL": f"{url}/webhooks/local",
        "METRICS_TOKEN": METRICS_TOKEN,
    }
    with sandbox() as base:
        job = docs["approval-migrate"]
        [box] = pod_spec(job)["containers"]
        migrated = subprocess.run(
            box["command"],
            cwd=base / "root",
            env=pod_env(box, secret, {}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert migrated.returncode == 0, migrated.stderr

        web, web_box, _, web_volumes = start(docs["approval-webhook"], secret, base, port)
        sweeper, sweep_box, sweep_env, sweep_vols = start(
            docs["approval-sweeper"], secret, base, port
        )
        try:
            probe = web_box["readinessProbe"]["httpGet"]["path"]
            until(lambda: _answers(f"{url}{probe}", web), "the webhook Pod is ready", 90)
            live = web_box["livenessProbe"]["httpGet"]["path"]
            assert loopback.get(f"{url}{live}", timeout=5).status_code == 200

            Ledger(runner.store.db).clear()
            paused = runner.start("Refund order A-1001: arrived broken", thread_id="t-pod")
            assert paused.status == "waiting", paused
            body = json.dumps(
                {
                    "type": "interrupt.answered",
                    "data": {
                        "id": paused.interrupt_id,
                        "externalId": "approval-worker:t-pod",
                        "actionRequests": [approve_item()],
                    },
                }
            )
            headers = sign(body, secret=LOCAL_SECRET, msg_id="msg_pod_1")
            reply = loopback.post(
                f"{url}/webhooks/local", content=body, headers=headers, timeout=30
            )
            assert reply.status_code == 202, reply.text
            until(lambda: runner.runs.get("t-pod").status == "done", "the delivery resumed", 90)

            auth = {"authorization": f"Bearer {METRICS_TOKEN}"}
            scrape = loopback.get(f"{url}/metrics", headers=auth, timeout=10)
            assert scrape.status_code == 200, scrape.text
            assert 'approval_webhook_deliveries_total{direction="in"' in scrape.text
            assert web_volumes["tmp"].joinpath("metrics").is_dir()

            beat = Path(sweep_env["HEARTBEAT_FILE"])
            until(lambda: beat.exists() or sweeper.poll() is not None, "a sweep pass", 90)
            assert sweeper.poll() is None, (base / "approval-sweeper.log").read_text()
            [mount] = sweep_box["volumeMounts"]  # the probe's paths, on the volume
            tmp = f"{sweep_vols[mount['name']]}/"
            check = [a.replace(f"{mount['mountPath']}/", tmp) for a in liveness_of(sweep_box)]
            assert subprocess.run(check, timeout=30).returncode == 0
        finally:
            codes = (stop(web), stop(sweeper))
        assert list((base / "root").iterdir()) == []  # the read-only root: nothing written
        logs = (base / "approval-webhook.log").read_text()
        assert codes[0] in (0, -signal.SIGTERM), logs[-3000:]  # uvicorn re-raises SIGTERM
        assert codes[1] == 0  # the sweeper stops when asked
        for line in logs.splitlines():  # LOG_FORMAT=json from the Secret: every line a record
            json.loads(line)


def liveness_of(box: dict) -> list[str]:
    return box["livenessProbe"]["exec"]["command"]


def _answers(url: str, proc: subprocess.Popen) -> bool:
    assert proc.poll() is None, "the Pod's process exited"
    try:
        return loopback.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
