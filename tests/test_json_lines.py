"""``LOG_FORMAT=json`` holds in every process: the commands' result lines (``run``'s pause and
thread, each run a sweep handled) are JSON records like every log line, on the same streams."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from servers import LOCAL_SECRET

from testkit.databases import ROOT, settings_to_clear

COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")


def command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in settings_to_clear()}
    db = {k: os.environ[k] for k in ("DATABASE_URL", "SQLITE_PATH") if k in os.environ}
    env.update(db, LOG_FORMAT="json", WEBHOOK_SECRET=LOCAL_SECRET)
    done = subprocess.run(
        [COMMAND, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_run_and_recover_write_json_lines_only(backend, tmp_path: Path):
    started = command(tmp_path, "run", "--thread-id", "t-json", "Refund order A-1001: broken")
    swept = command(tmp_path, "recover")
    for done in (started, swept):
        for line in (done.stdout + done.stderr).splitlines():
            record = json.loads(line)
            assert {"time", "level", "logger", "message"} <= set(record), line
    [pause] = [json.loads(line) for line in started.stdout.splitlines()]
    assert pause["thread_id"] == "t-json" and "paused on interrupt" in pause["message"]
