"""No side effects at import: ``import webhook`` reads no setting, opens no database and never
exits; ``uvicorn webhook:app`` checks the settings when it starts, and a bad one is one
``error:`` line and exit 2, as every other entry point says it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testkit.databases import ROOT, settings_to_clear
from testkit.webapp import free_port, uvicorn_command, worker_env


def test_importing_webhook_with_no_settings_creates_nothing_and_does_not_exit(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in set(settings_to_clear())}
    env["PYTHONPATH"] = str(ROOT)
    code = "import webhook; print(type(webhook.app).__name__)"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "FastAPI" and proc.stderr == ""
    assert list(tmp_path.iterdir()) == []  # no approvals.db, nothing else


@pytest.mark.parametrize(
    ("setting", "says", "code"),
    [
        ({"LEASE_SECONDS": "abc"}, "error: LEASE_SECONDS=", 2),
        ({"DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none"}, "error: cannot connect", 1),
        ({"DATABSE_URL": "x"}, "error: unknown setting DATABSE_URL: did you mean DATABASE_URL?", 2),
    ],
    ids=["bad-setting", "unreachable-database", "unknown-setting"],
)
def test_a_bad_setting_stops_the_server_at_start_up_with_one_line_and_exit_2(
    tmp_path, setting, says, code
):
    env = worker_env({"SQLITE_PATH": str(tmp_path / "a.db")}, **setting)
    proc = subprocess.run(
        uvicorn_command("webhook:app", free_port()),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
    )
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(says), proc.stderr
    assert "Traceback" not in proc.stderr
