"""The installed command, ``approval-worker``: from any directory, the same exit codes as the
entry scripts (0 ok, 1 a run failed or the database could not be reached, 2 bad input or
settings), and a typo in a setting's name stops it before anything is written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from core import version
from testkit import zygote
from testkit.databases import settings_to_clear
from testkit.servers import free_port

COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")
DEMO = "Refund order A-1001: the kettle arrived broken"


def aw(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in settings_to_clear()}
    return zygote.run(
        [COMMAND, *args],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_version_and_help(tmp_path: Path):
    done = aw(tmp_path, "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"approval-worker {version.current()}"
    assert version.current() != "0+unknown"
    helped = aw(tmp_path, "--help")
    for name in ("run", "recover", "serve", "inbox", "keys", "settings", "migrate"):
        assert f"\n  {name} " in helped.stdout
    assert aw(tmp_path, "nonsense").returncode == 2
    assert aw(tmp_path).returncode == 2


def test_the_loop_from_another_directory(tmp_path: Path):
    paused = aw(tmp_path, "run", DEMO)
    assert paused.returncode == 0, paused.stderr
    request_id = paused.stdout.split()[3]
    listed = aw(tmp_path, "inbox", "list")
    assert listed.returncode == 0 and listed.stdout.startswith(request_id)
    shown = aw(tmp_path, "inbox", "show", request_id)
    assert shown.returncode == 0 and f"id: {request_id}" in shown.stdout, shown.stderr
    # the command line never runs the graph: no app or ``recover --forever`` runs, so the
    # queued run waits for the next sweep
    approved = aw(tmp_path, "inbox", "approve", request_id, "--by", "alice")
    assert approved.returncode == 0 and "queued for a resumer" in approved.stdout
    assert "Refunded" not in approved.stdout
    swept = aw(tmp_path, "recover", "--wait")
    assert swept.returncode == 0 and "Refunded 49.90 EUR" in swept.stdout, swept.stderr
    again = aw(tmp_path, "recover", "--wait")
    assert again.returncode == 0 and again.stdout == ""  # nothing left for a sweep
    assert aw(tmp_path, "migrate").stdout.startswith("schema at version ")
    key = aw(tmp_path, "keys", "create", "--name", "ops", "--role", "operator")
    assert key.returncode == 0 and key.stdout.strip()
    assert (tmp_path / "approvals.db").exists()


def test_recover_wait_ignores_pending_approvals(tmp_path: Path):
    """``--wait`` sweeps until nothing is runnable: a run waiting on reviewers does not keep it
    going (it would never exit)."""
    assert aw(tmp_path, "run", DEMO).returncode == 0
    done = aw(tmp_path, "recover", "--wait", "--interval", "0.2")
    assert done.returncode == 0, done.stderr


def test_bad_input_exits_2(tmp_path: Path):
    done = aw(tmp_path, "recover", "--interval", "0")
    assert done.returncode == 2 and done.stderr.startswith("error: --interval")
    done = aw(tmp_path, "inbox", "show", "no-such-id")
    assert done.returncode == 2 and "approval-worker inbox list" in done.stderr


@pytest.mark.parametrize("where", ["env", "dotenv"])
@pytest.mark.parametrize(
    "typo,meant",
    [
        ("DATABSE_URL", "DATABASE_URL"),  # a shared-nothing name: caught by its edit distance
        ("REFUND_APROVAL_THRESHOLD", "REFUND_APPROVAL_THRESHOLD"),
        ("LOGFORMAT", "LOG_FORMAT"),
    ],
)
def test_an_unknown_setting_stops_start_up_naming_the_closest(
    tmp_path: Path, where: str, typo: str, meant: str
):
    """A typo would otherwise switch the database (``DATABSE_URL``: a new local SQLite file)."""
    value = "postgresql://postgres@127.0.0.1:5432/test" if typo == "DATABSE_URL" else "0"
    env = {typo: value}
    if where == "dotenv":
        (tmp_path / ".env").write_text(f"{typo}={value}\n")
        env = {}
    done = aw(tmp_path, "run", DEMO, **env)
    assert done.returncode == 2
    source = ".env" if where == "dotenv" else "the environment"
    assert done.stderr.strip().splitlines() == [
        f"error: unknown setting {typo}: did you mean {meant}? (set in {source})"
    ]
    assert not (tmp_path / "approvals.db").exists()  # nothing written
    assert aw(tmp_path, "settings", "--check", **env).returncode == 2


def test_any_unknown_name_in_dotenv_stops_start_up(tmp_path: Path):
    """``.env`` is this project's file: a name far from every setting is refused there too."""
    (tmp_path / ".env").write_text("COMPLETELY_ELSE=1\n")
    done = aw(tmp_path, "settings", "--check")
    assert done.returncode == 2
    assert done.stderr.startswith("error: unknown setting COMPLETELY_ELSE (set in .env)")


def test_a_database_that_cannot_be_reached_exits_1(tmp_path: Path):
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/test"
    for args in (["run", DEMO], ["recover"], ["inbox", "list"], ["migrate"]):
        done = aw(tmp_path, *args, DATABASE_URL=closed, DATABASE_CONNECT_TIMEOUT="1")
        assert done.returncode == 1, (args, done.stderr)
        assert done.stderr.startswith("error: cannot connect to Postgres"), done.stderr
    script = aw(ROOT, "run", DEMO, DATABASE_URL=closed, DATABASE_CONNECT_TIMEOUT="1")
    assert script.returncode == 1


def test_entry_scripts_are_the_same_commands(tmp_path: Path):
    for script, args in (("run.py", ["--help"]), ("recover.py", ["--help"])):
        done = zygote.run(
            [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / script), *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and "Exit 0" in done.stdout.replace("\n", " ")
