"""Mistakes a user can make get one line, a non-zero exit and no change of state."""

from __future__ import annotations

import os

import pytest
from conftest import run_cli

from worker.runner import Runner


def snapshot(store) -> dict:
    tables = ("runs", "inbox_requests", "refunds", "run_events")
    return {t: store.db.all(f"SELECT * FROM {t} ORDER BY 1") for t in tables}


def assert_one_line_error(proc, *needles: str, code: int = 2) -> None:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def waiting(runner: Runner) -> str:
    outcome = runner.start("Refund order A-1001: the kettle arrived broken", thread_id="t-bad")
    return outcome.interrupt_id


def test_unknown_interrupt_id(store, waiting):
    before = snapshot(store)
    proc = run_cli("inbox", "approve", "no-such-id", check_rc=None)
    assert_one_line_error(proc, "no approval request with id 'no-such-id'", "inbox list")
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ("{not json", "--args is not valid JSON"),
        ('["A-1001"]', "must be a JSON object"),
        (
            '{"order_id": "A-1001", "amount": -5, "reason": "x"}',
            "invalid arguments for issue_refund",
        ),
        ('{"order_id": "A-1001", "reason": "x"}', "'amount' is a required property"),
    ],
)
def test_invalid_edit_arguments(store, waiting, args, needle):
    before = snapshot(store)
    proc = run_cli("inbox", "edit", waiting, "--args", args, check_rc=None)
    assert_one_line_error(proc, needle)
    assert snapshot(store) == before


def test_answering_twice_is_refused(store, waiting):
    run_cli("inbox", "approve", waiting, "--by", "alice")
    before = snapshot(store)
    proc = run_cli("inbox", "reject", waiting, "--reason", "changed my mind", check_rc=None)
    assert_one_line_error(proc, "already decided", "through the inbox command line, by alice")
    assert snapshot(store) == before


def test_empty_request_and_unknown_workflow(store):
    assert_one_line_error(run_cli("run.py", "  ", check_rc=None), "request text is empty")
    proc = run_cli("run.py", "Refund A-1001", "--workflow", "payroll", check_rc=None)
    assert_one_line_error(proc, "unknown workflow 'payroll'", "refund")
    assert snapshot(store)["runs"] == []


@pytest.mark.parametrize(
    "script", [("run.py", "Refund order A-1001: x"), ("recover.py",), ("inbox", "list")]
)
def test_unreachable_database_url_names_the_setting_not_the_password(monkeypatch, tmp_path, script):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", "postgresql://app:s3cr3t-pw@127.0.0.1:1/approvals")
    monkeypatch.setenv("DATABASE_CONNECT_TIMEOUT", "1")
    proc = run_cli(*script, check_rc=None)
    # the database cannot be reached: exit 1 (try later), not 2 (fix the command)
    assert_one_line_error(proc, "DATABASE_URL=postgresql://app:***@127.0.0.1:1/approvals", code=1)
    assert "s3cr3t-pw" not in proc.stderr + proc.stdout
    assert not os.path.exists(tmp_path / "approvals.db")  # no silent fallback to SQLite


def test_a_database_url_that_is_not_postgres(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", "mysql://root:hunter2@localhost/x")
    proc = run_cli("recover.py", "--list", check_rc=None)
    assert_one_line_error(proc, "DATABASE_URL must start with postgresql://")
    assert "hunter2" not in proc.stderr


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("postgresql://app:pa ss word@127.0.0.1:1/approvals", "pa ss word"),
        ("postgresql://app:50%25off@127.0.0.1:1/approvals", "50%25off"),
        ("postgresql://app:ha#sh@127.0.0.1:1/approvals", "ha#sh"),
        ("postgresql://app@127.0.0.1:1/approvals?password=qu3ry-pw", "qu3ry-pw"),
        ("postgresql://app:v6-secret@[::1]:1/approvals", "v6-secret"),
    ],
    ids=["space", "percent", "hash", "query", "ipv6"],
)
def test_no_spelling_of_the_database_password_reaches_the_error(
    monkeypatch, tmp_path, url, password
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("DATABASE_CONNECT_TIMEOUT", "1")
    proc = run_cli("recover.py", "--list", check_rc=None)
    # a URL libpq cannot read is a setting to fix (2); an unreachable server is not (1)
    assert_one_line_error(proc, "DATABASE_URL", code=2 if " " in url else 1)
    for spelling in {password, password.replace("%25", "%")}:
        assert spelling not in proc.stderr + proc.stdout, proc.stderr
