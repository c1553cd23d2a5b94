"""Mistakes a user can make get one line, a non-zero exit and no change of state."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import ROOT, run_cli

from testkit import zygote
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
    assert_one_line_error(proc, "already decided", "by alice through the inbox command line")
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


BAD_UTF8 = "a\udcffb"  # the bytes a\xffb: how Python hands invalid UTF-8 in argv to a program


@pytest.mark.parametrize("spec", [".x:y", "json:loads", "os:getcwd"])
def test_a_workflow_spec_that_is_no_workflow(store, spec):
    proc = run_cli("run.py", "Refund order A-1001: x", "--workflow", spec, check_rc=None)
    assert_one_line_error(proc, f"workflow {spec!r}")
    assert "Traceback" not in proc.stderr + proc.stdout
    assert snapshot(store)["runs"] == []


@pytest.mark.parametrize(
    "args",
    [
        ("run.py", "Refund order A-1001: x", "--thread-id", BAD_UTF8),
        ("run.py", "Refund order A-1001: x", "--requested-by", BAD_UTF8),
        ("run.py", f"Refund order A-1001: {BAD_UTF8}"),
        ("recover.py", "--history", BAD_UTF8),
        ("inbox", "approve", "{waiting}", "--by", BAD_UTF8),
        ("-m", "api.keys", "create", "--name", BAD_UTF8, "--role", "reviewer"),
    ],
    ids=["thread-id", "requested-by", "request", "history", "by", "name"],
)
def test_an_argument_that_is_not_utf8(store, waiting, args):
    before = snapshot(store)
    if args[0] == "-m":  # a module run as the installed command runs it
        proc = zygote.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    else:
        proc = run_cli(*(a.replace("{waiting}", waiting) for a in args), check_rc=None)
    assert_one_line_error(proc, "is not valid UTF-8 text")
    assert snapshot(store) == before
    assert store.db.all("SELECT * FROM api_keys") == []


def test_decisions_nested_five_thousand_deep(store, waiting):
    before = snapshot(store)
    deep = "[" * 5000 + "]" * 5000
    for decisions in (deep, '[{"type": "approve", "x": ' + deep + "}]"):
        proc = run_cli("inbox", "decide", waiting, "--decisions", decisions, check_rc=None)
        assert_one_line_error(proc, "nested too deeply")
    proc = run_cli("inbox", "edit", waiting, "--args", '{"a": ' + deep + "}", check_rc=None)
    assert_one_line_error(proc, "nested too deeply")
    assert snapshot(store) == before


def test_bob_and_Bob_are_one_approver_of_a_two_approver_request(store, monkeypatch):  # noqa: N802
    """The CLI's ``--by`` is self-asserted; names are compared normalised, so a second spelling
    of one person neither completes the quorum nor leaves anything for a sweep to refuse."""
    monkeypatch.setenv("REFUND_QUORUM_AMOUNT", "500")
    monkeypatch.setenv("REFUND_QUORUM", "2")
    run_cli("run.py", "Refund order A-1004: wobbly", "--thread-id", "t-quorum")
    [row] = store.db.all("SELECT interrupt_id, quorum FROM runs WHERE thread_id = 't-quorum'")
    assert row["quorum"] == 2
    first = run_cli("inbox", "approve", row["interrupt_id"], "--by", "bob")
    assert "1 of 2 distinct approvals (bob)" in first.stdout
    before = snapshot(store)
    for spelling in ("Bob", " BOB ", "ｂｏｂ"):
        proc = run_cli("inbox", "approve", row["interrupt_id"], "--by", spelling, check_rc=None)
        assert_one_line_error(proc, "bob already approved")
    assert snapshot(store) == before
    for _ in range(2):
        run_cli("recover.py")
    assert snapshot(store) == before  # no "decision refused" event, sweep after sweep
    [run] = store.db.all("SELECT status FROM runs WHERE thread_id = 't-quorum'")
    assert run["status"] == "waiting"
    done = run_cli("inbox", "approve", row["interrupt_id"], "--by", "carol")
    assert done.returncode == 0, done.stderr
