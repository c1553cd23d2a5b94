"""Log lines: JSON or text, one line each, ids from the context, secrets replaced, tracebacks
only for unexpected errors and then on the same line."""

from __future__ import annotations

import json
import logging

import pytest

from core.errors import UserError
from core.logs import configure_logging, request_id

KEY = "vig_known-secret-never-logged"
DB_PASSWORD = "pw-known-secret-never-logged"


@pytest.fixture
def logged(monkeypatch, capsys):
    monkeypatch.setenv("VIGILATOR_API_KEY", KEY)
    monkeypatch.setenv("DATABASE_URL", f"postgresql://app:{DB_PASSWORD}@127.0.0.1:5432/x")

    def run(fmt: str) -> list[str]:
        monkeypatch.setenv("LOG_FORMAT", fmt)
        configure_logging("INFO")
        log = logging.getLogger("test.logs")
        token = request_id.set("req-42")
        try:
            log.info("calling with key %s", KEY)
            log.warning("connect to postgresql://app:%s@127.0.0.1/x failed", DB_PASSWORD)
            try:
                raise UserError(f"bad key {KEY}\nsecond line")
            except UserError:
                log.exception("expected")
            try:
                raise RuntimeError("boom")
            except RuntimeError:
                log.exception("unexpected", extra={"thread_id": "t-1"})
        finally:
            request_id.reset(token)
        return capsys.readouterr().err.splitlines()

    yield run
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == "approval-worker"]:
        root.removeHandler(handler)  # it writes to this test's captured stderr


def test_json_lines_carry_ids_and_no_secret(logged):
    lines = logged("json")
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert len(records) == 4
    assert all(r["request_id"] == "req-42" and r["logger"] == "test.logs" for r in records)
    assert records[0]["level"] == "info" and records[0]["message"] == "calling with key ***"
    assert "traceback" not in records[2] and records[2]["error"] == "UserError: bad key ***"
    assert records[3]["thread_id"] == "t-1" and "RuntimeError: boom" in records[3]["traceback"]
    text = "\n".join(lines)
    assert KEY not in text and DB_PASSWORD not in text


def test_text_lines_are_one_line_each_and_no_secret(logged):
    lines = logged("text")
    assert len(lines) == 4 and all("[req-42" in line for line in lines)
    assert KEY not in "\n".join(lines) and DB_PASSWORD not in "\n".join(lines)
