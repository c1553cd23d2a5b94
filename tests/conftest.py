"""Fixtures: every test runs against SQLite and a real Postgres, each in a fresh namespace.

Postgres tests use ``TEST_DATABASE_URL`` (default: the local ``test`` database). They skip when
the server is unreachable, unless ``REQUIRE_POSTGRES=1`` (set by CI), where they fail instead.
Each test gets its own Postgres schema through ``search_path``, so tests never see each other.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from testkit.databases import (
    DEFAULT_PG,
    ROOT,
    TEST_RATE_LIMITS,
    fresh_database,
    settings_to_clear,
)

PG_URL = os.environ.get("TEST_DATABASE_URL", DEFAULT_PG)


def _postgres_available() -> str | None:
    import psycopg

    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0]
    return None


@pytest.fixture(scope="session")
def postgres_url() -> str:
    problem = _postgres_available()
    if problem:
        if os.environ.get("REQUIRE_POSTGRES") == "1":
            pytest.fail(f"REQUIRE_POSTGRES=1 but Postgres at {PG_URL} is unreachable: {problem}")
        pytest.skip(f"Postgres unreachable ({problem}); set REQUIRE_POSTGRES=1 to fail instead")
    return PG_URL


ENV_NAMES = tuple(settings_to_clear())


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path, monkeypatch) -> Iterator[str]:
    """Point DATABASE_URL/SQLITE_PATH at a fresh database for this test; return the backend."""
    for name in settings_to_clear():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # so no stray .env or approvals.db is picked up
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with fresh_database(request.param, tmp_path, pg) as env:
        for name, value in {**TEST_RATE_LIMITS, **env}.items():
            monkeypatch.setenv(name, value)
        yield request.param


@pytest.fixture
def store(backend):
    from store.db import open_store

    with open_store() as s:
        yield s


@pytest.fixture
def runner(store):
    from worker.runner import Runner

    return Runner(store)


def run_cli(
    *args: str, timeout: float = 60, check_rc: int | None = 0
) -> subprocess.CompletedProcess:
    """Run an entry script (``run.py``, ``recover.py``, ``-m inbox``) as a real process."""
    cmd = [sys.executable, *(["-m", "inbox"] if args[0] == "inbox" else [str(ROOT / args[0])])]
    proc = subprocess.run(
        [*cmd, *args[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def pytest_sessionfinish(session, exitstatus):
    """No secret in any log line of the whole suite: every server and command log the tests
    wrote (under pytest's temporary folder) is searched for the canary secret the worker
    processes hold, and for the test webhook secrets."""
    from testkit.databases import CANARY
    from testkit.servers import LOCAL_SECRET, SECRET

    base = session.config._tmp_path_factory.getbasetemp()  # noqa: SLF001 - pytest's own folder
    leaks = []
    for path in base.rglob("*.log"):
        text = path.read_text(errors="replace")
        leaks += [
            f"{path}: {name}"
            for name, value in (
                ("canary", CANARY),
                ("webhook secret", SECRET),
                ("local secret", LOCAL_SECRET),
            )
            if value in text
        ]
    if leaks:
        session.exitstatus = 1
        print("\nSECRETS IN LOGS:\n" + "\n".join(leaks))
