"""``LOG_FORMAT=json`` holds in every process: the commands' result lines (``run``'s pause and
thread, each run a sweep handled) are JSON records like every log line, on the same streams."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from testkit import zygote
from testkit.databases import ROOT, settings_to_clear
from testkit.webapp import LOCAL_SECRET

COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")


def command(tmp_path: Path, *args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in settings_to_clear()}
    db = {k: os.environ[k] for k in ("DATABASE_URL", "SQLITE_PATH") if k in os.environ}
    env.update(db, LOG_FORMAT="json", WEBHOOK_SECRET=LOCAL_SECRET)
    done = zygote.run(
        [COMMAND, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == rc, done.stderr
    return done


def records(text: str) -> list[dict]:
    """Every line a log record (the shape every log line has)."""
    out = []
    for line in text.splitlines():
        record = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(record), line
        out.append(record)
    return out


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


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_every_command_s_result_lines_are_records(backend, tmp_path: Path):
    """``migrate``, ``settings --check``, the inbox, keys and halts write records, errors
    included (level ``error``, on stderr); an answer asked for is written as it is: a new key's
    token alone on stdout."""
    said = [
        command(tmp_path, "migrate"),
        command(tmp_path, "settings", "--check"),
        command(tmp_path, "run", "--thread-id", "t-rec", "Refund order A-1001: broken"),
        command(tmp_path, "inbox", "list"),
        command(tmp_path, "halt", "--tool", "issue_refund", "--reason", "drill", "--by", "ops"),
        command(tmp_path, "unhalt", "--tool", "issue_refund", "--reason", "done", "--by", "ops"),
    ]
    for done in said:
        assert records(done.stdout + done.stderr), done.args
    [listed] = records(said[3].stdout)
    request = listed["message"].split()[0]
    approved = command(tmp_path, "inbox", "approve", request, "--by", "alice")
    assert [r["message"] for r in records(approved.stdout)][0].startswith("approve recorded")
    created = command(tmp_path, "keys", "create", "--name", "alice", "--role", "reviewer")
    [token] = created.stdout.splitlines()  # the answer: the key itself, nothing else
    assert not token.startswith("{")
    [note] = records(created.stderr)
    assert "shown once" in note["message"]
    [key] = records(command(tmp_path, "keys", "list").stdout)
    assert "alice" in key["message"]
    refused = command(tmp_path, "inbox", "show", "no-such-request", rc=2)
    [error] = records(refused.stderr)
    assert error["level"] == "error" and error["message"].startswith("error: no approval request")
    assert refused.stdout == ""
