"""One settings module: the docs' settings table and .env.example match it, bad values stop every
entry point with one line and exit 2 before anything is written, and exit codes say how a run
ended."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest
from conftest import ROOT, run_cli

from core import settings
from core.settings import docs


def test_settings_table_and_env_example_match_the_settings_module():
    readme = (ROOT / docs.PAGE).read_text()
    assert docs.readme_with_table(readme) == readme, (
        f"{docs.PAGE} drifted: run `uv run python -m core.settings --write`"
    )
    example = (ROOT / ".env.example").read_text()
    assert example == docs.env_example(), (
        ".env.example drifted: run `uv run python -m core.settings --write`"
    )
    block = readme.split(docs.README_START)[1].split(docs.README_END)[0]
    rows = re.findall(r"^\| `([A-Z_]+)` \|", block, re.M)
    assert rows == [s.name for s in settings.SETTINGS]
    keys = re.findall(r"^# ([A-Z_]+)=", example, re.M)
    assert sorted(keys) == sorted(s.name for s in settings.SETTINGS)
    assert not [k for k, n in Counter(keys).items() if n > 1]
    # nothing is set in the example: copying it changes no default
    assert not re.findall(r"^[A-Z_]+=", example, re.M)


def test_no_module_reads_the_environment_but_the_settings_module():
    readers = []
    for path in ROOT.glob("*/**/*.py"):
        top = path.parts[len(ROOT.parts)]
        if top in ("tests", "bench", "testkit", ".venv") or "settings" in path.parts:
            continue
        if "os.environ" in path.read_text() or "os.getenv" in path.read_text():
            readers.append(str(path.relative_to(ROOT)))
    assert readers == []


BAD = [
    ("LEASE_SECONDS", "abc", "LEASE_SECONDS='abc' must be a number"),
    ("DATABASE_POOL_SIZE", "abc", "DATABASE_POOL_SIZE='abc' must be a whole number"),
    ("RETRY_MAX_ATTEMPTS", "abc", "RETRY_MAX_ATTEMPTS='abc' must be a whole number"),
    ("ANTHROPIC_TIMEOUT", "abc", "ANTHROPIC_TIMEOUT='abc' must be a number"),
    ("ANTHROPIC_MAX_RETRIES", "abc", "ANTHROPIC_MAX_RETRIES='abc' must be a whole number"),
    ("APPROVAL_EXPIRES_IN", "soon", "APPROVAL_EXPIRES_IN='soon' is not a duration"),
    ("SEPARATION_OF_DUTIES", "maybe", "SEPARATION_OF_DUTIES='maybe' must be 1 or 0"),
    ("INBOX", "email", "INBOX='email' must be one of: local, vigilator"),
    ("VIGILATOR_API_KEY", "key\nwith-newline", "VIGILATOR_API_KEY contains a control character"),
]


@pytest.mark.parametrize(("name", "value", "message"), BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("script", ["run.py", "recover.py"])
def test_a_bad_setting_is_one_line_and_exit_2_before_anything_is_written(
    backend, tmp_path, name, value, message, script
):
    args = (script, "Refund order A-1001: broken") if script == "run.py" else (script,)
    proc = run_cli(*args, check_rc=2, env={name: value})
    assert proc.stderr.strip() == f"error: {message}" or (
        proc.stderr.startswith(f"error: {message}") and proc.stderr.count("\n") == 1
    ), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    if backend == "sqlite":
        assert not os.path.exists(tmp_path / "approvals.db")
    else:
        from store.db import open_store

        with open_store() as store:
            assert store.db.all("SELECT * FROM runs") == []


def test_a_failed_run_exits_1_and_paused_or_done_exit_0(backend, monkeypatch):
    paused = run_cli("run.py", "Refund order A-1001: broken", check_rc=0)
    assert paused.stdout.startswith("paused on interrupt ")
    assert re.match(r"thread: thread_[0-9a-f]{32}  model: ", paused.stderr)
    done = run_cli("run.py", "Refund order A-1003: the pan cracked", check_rc=0)
    assert done.stdout.startswith("Refunded 15.50 EUR")
    monkeypatch.setenv("FAULTS", "tool.after-write=raise")
    monkeypatch.setenv("REFUND_APPROVAL_THRESHOLD", "250")  # A-1003 has nothing left to refund
    failed = run_cli("run.py", "Refund order A-1005: broken", "--thread-id", "t-fail", check_rc=1)
    assert failed.stdout.startswith("failed: InjectedFault")
    again = run_cli("recover.py", "--retry", "t-fail", check_rc=1)
    assert again.stdout.startswith("t-fail  failed")
    monkeypatch.delenv("FAULTS")
    assert run_cli("recover.py", "--retry", "t-fail", check_rc=0).stdout.startswith("t-fail  ")


WHSEC = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3"  # 30 bytes, base64


def test_a_file_mounted_secret_sets_its_setting_and_never_shows(monkeypatch, tmp_path):
    """Kubernetes and Docker mount each secret as a file named like the key: with
    ``SECRETS_DIR`` pointing there, the file sets the setting (trailing newline dropped), the
    environment still wins, and the loaded model holds it as a ``SecretStr``."""
    from core.errors import UserError
    from core.settings import model

    folder = tmp_path / "secrets"
    folder.mkdir()
    (folder / "WEBHOOK_SECRET").write_text(WHSEC + "\n")
    (folder / "LEASE_SECONDS").write_text("42\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)
    monkeypatch.delenv("LEASE_SECONDS", raising=False)
    monkeypatch.setenv("SECRETS_DIR", str(folder))
    monkeypatch.setenv("LEASE_SECONDS", "7")  # the environment wins over the file
    loaded = model.load()
    assert WHSEC not in repr(loaded)
    assert loaded.WEBHOOK_SECRET.get_secret_value() == WHSEC  # type: ignore[attr-defined]
    assert settings.WEBHOOK_SECRET.get() == (WHSEC,)  # read where used, as every setting
    assert settings.LEASE_SECONDS.get() == 7.0

    settings.check()  # passes, and a second check of the same sources is not repeated
    settings.check()
    (folder / "SLACK_SIGNING_SECRET").write_text("bad\x01secret")  # but a changed one is
    with pytest.raises(UserError) as refused:
        settings.check()
    assert str(refused.value) == (
        "SLACK_SIGNING_SECRET contains a control character (a stray newline?)"
    )

    monkeypatch.setenv("SECRETS_DIR", str(tmp_path / "missing"))
    with pytest.raises(UserError, match="SECRETS_DIR=.* is not a directory"):
        settings.check()
