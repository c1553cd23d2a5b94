"""The JavaScript ``@langchain/langgraph-sdk``, installed from npm once into a cached folder
(pinned; the same for every test and worker), and node scripts run against it.

A script is copied beside the installed ``node_modules`` so its ``import`` of the SDK resolves
there; it reads what it needs from the environment and prints one JSON line."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

VERSION = "1.15.0"  # @langchain/langgraph-sdk, pinned
HERE = Path(__file__).resolve().parent
CACHE = Path(
    os.environ.get("LANGGRAPH_JS_DIR")
    or Path.home() / ".cache" / "approval-worker" / f"langgraph-sdk-js-{VERSION}"
)


def installed() -> Path:
    """The folder holding the SDK (installed now if it is not there yet; one installer at a
    time across processes)."""
    marker = CACHE / "node_modules" / "@langchain" / "langgraph-sdk" / "package.json"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            (CACHE / "package.json").write_text('{"private": true, "type": "module"}\n')
            subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                    str(CACHE),
                    f"@langchain/langgraph-sdk@{VERSION}",
                ],
                check=True,
                capture_output=True,
                timeout=600,
            )
        assert json.loads(marker.read_text())["version"] == VERSION
    return CACHE


def run_script(name: str, env: dict[str, str], timeout: float = 120) -> dict[str, Any]:
    """Run ``testkit/<name>`` with node against the installed SDK; its JSON line."""
    folder = installed()
    shutil.copy(HERE / name, folder / name)
    done = subprocess.run(
        ["node", str(folder / name)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
