"""The deploy recipes as a platform reads them: a kustomize overlay rendered, and a container's
environment assembled from the image's ``ENV``, the Secret and the manifest's ``env`` (the
exact variables a Pod gets), with the volumes mapped onto local directories."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

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
