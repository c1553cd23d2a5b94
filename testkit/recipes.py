"""The deploy recipes as a platform reads them: a kustomize overlay rendered, and a container's
environment assembled from the image's ``ENV``, the Secret and the manifest's ``env`` (the
exact variables a Pod gets), with the volumes mapped onto local directories."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from testkit import loopback
from testkit.databases import ROOT

_KNOWN_KEYS = {"apiVersion", "kind", "resources", "images"}


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """The documents ``kubectl kustomize directory`` prints, for the subset of kustomize this
    repository uses (``resources``, ``images``); anything else fails rather than being ignored."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - _KNOWN_KEYS
    assert not unknown, f"{directory}: kustomize fields this renderer does not know: {unknown}"
    docs: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            docs += kustomize(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for image in spec.get("images", []):
        for box in containers(docs):
            if box["image"].split(":")[0] == image["name"]:
                box["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    return docs


def kubectl_kustomize(directory: Path) -> list[dict[str, Any]] | None:
    """kubectl's own rendering, when kubectl is installed (it is not a dependency)."""
    if shutil.which("kubectl") is None:
        return None
    out = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


def containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        box
        for doc in docs
        if doc["kind"] in ("Deployment", "CronJob", "Job")
        for box in pod_spec(doc)["containers"]
    ]


def image_env() -> dict[str, str]:
    """The final stage's ``ENV`` of the Dockerfile (``KEY=value`` pairs, continued lines)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    final = text[text.rindex("\nFROM ") :]
    env: dict[str, str] = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            for key, value in re.findall(r'(\w+)="?([^"\s]*)"?', line[4:]):
                env[key] = value
    return env


@contextmanager
def sandbox() -> Iterator[Path]:
    """A root for one Pod: ``root/`` read-only (the image's read-only root filesystem and
    working directory: enforced for a non-root user; a test run as root checks it stayed empty)
    and one writable directory per volume."""
    base = Path(tempfile.mkdtemp(prefix="pod-", dir="/tmp"))
    try:
        base.chmod(0o755)
        (base / "root").mkdir()
        (base / "root").chmod(0o555)
        yield base
    finally:
        (base / "root").chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def volume(base: Path, name: str) -> Path:
    """A fresh, empty directory for an ``emptyDir`` volume."""
    path = base / "volumes" / name
    path.mkdir(parents=True)
    return path


def confined(
    cmd: list[str],
    *,
    user: tuple[int, int] | None,
    writable: tuple[Path, ...] = (),
    tmpfs: tuple[str, ...] = ("/tmp",),
    umask: str | None = None,
) -> list[str]:
    """``cmd`` as a container or a hardened unit runs it: in a mount namespace of its own
    (``unshare -m``, as root) where this machine's root is bound read-only (Docker's
    ``--read-only``, systemd's ``ProtectSystem=strict``), each of ``tmpfs`` is a fresh empty
    tmpfs (``--tmpfs /tmp``, ``PrivateTmp=yes``), each of ``writable`` is bound back writable
    (a volume, ``ReadWritePaths=``), then run as ``user`` (uid, gid) with no supplementary
    groups. The checkout and ``writable`` paths under a ``tmpfs`` are bound back into it."""
    steps = [
        "set -e",
        "mount --make-rprivate /",
        "mount --rbind / /",
        "mount -o remount,bind,ro /",
    ]
    for place in tmpfs:  # prepared on /mnt, then moved: a checkout under it (CI clones into
        # /tmp) is bound back into the new tmpfs, the rest of it stays hidden
        steps.append("mount -n -t tmpfs -o mode=1777 tmpfs /mnt")
        for keep in (ROOT, *writable):
            inside = Path(keep).resolve()
            if inside.is_relative_to(place):
                spot = shlex.quote(str(Path("/mnt") / inside.relative_to(place)))
                steps += [f"mkdir -p {spot}", f"mount -n --rbind {shlex.quote(str(inside))} {spot}"]
        steps.append(f"mount -n --move /mnt {shlex.quote(place)}")
    for path in writable:
        quoted = shlex.quote(str(path))
        steps += [f"mount --bind {quoted} {quoted}", f"mount -o remount,bind,rw {quoted}"]
    steps.append('cd "$(pwd)"')  # the working directory again, through the new mounts
    if umask:
        steps.append(f"umask {umask}")
    run = shlex.join(cmd)
    if user is not None:
        uid, gid = user
        run = f"exec setpriv --reuid={uid} --regid={gid} --clear-groups -- {run}"
    else:
        run = f"exec {run}"
    return ["unshare", "-m", "sh", "-c", "\n".join([*steps, run])]


def answers(url: str, proc: subprocess.Popen[Any]) -> bool:
    """``url`` answers 200 (the process must still be alive)."""
    import httpx

    assert proc.poll() is None, "the process exited"
    try:
        return loopback.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def deliver_and_scrape(runner: Any, url: str, secret: str, thread_id: str, **scrape: str) -> str:
    """What a recipe must answer: a run paused in this test's process, approved by a signed
    local-inbox delivery to the recipe's app, done; then a scrape of ``/metrics`` (headers
    ``scrape``). Returns the scrape's text."""
    import json

    from agent.ledger import Ledger
    from testkit.servers import svix_headers
    from testkit.wait import until

    Ledger(runner.store.db).clear()
    paused = runner.start("Refund order A-1001: arrived broken", thread_id=thread_id)
    assert paused.status == "waiting", paused
    item = {"name": "issue_refund", "decision": "approve", "decidedByName": "alice"}
    body = json.dumps(
        {
            "type": "interrupt.answered",
            "data": {
                "id": paused.interrupt_id,
                "externalId": f"approval-worker:{thread_id}",
                "actionRequests": [item],
            },
        }
    )
    headers = svix_headers(body, secret=secret, msg_id=f"msg_{thread_id}")
    reply = loopback.post(f"{url}/webhooks/local", content=body, headers=headers, timeout=30)
    assert reply.status_code == 202, reply.text
    # the app resumes the run in the background: poll its row
    until(lambda: runner.runs.get(thread_id).status == "done", "the delivery resumed", 120)
    assert len(Ledger(runner.store.db).refunds(thread_id)) == 1
    got = loopback.get(f"{url}/metrics", headers=scrape, timeout=10)
    assert got.status_code == 200, got.text
    assert 'approval_webhook_deliveries_total{direction="in"' in got.text
    return got.text


def stop(proc: subprocess.Popen[Any]) -> int:
    """SIGTERM, as every platform stops a process; its exit code."""
    proc.terminate()
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
