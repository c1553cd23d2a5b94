"""Fixtures: every test runs against SQLite and a real Postgres, each in a fresh namespace.

Postgres tests use ``TEST_DATABASE_URL`` (default: the local ``test`` database). They skip when
the server is unreachable, unless ``REQUIRE_POSTGRES=1`` (set by CI), where they fail instead.
Each test gets its own Postgres schema through ``search_path``, so tests never see each other.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


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


def _schema_url(base: str, schema: str) -> str:
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}')}"


# Settings a developer's shell (or .env) may hold that would change what a test exercises
# (an ANTHROPIC_API_KEY would send every test to Claude); every ANTHROPIC_* is cleared too.
ENV_NAMES = (
    "DATABASE_URL",
    "SQLITE_PATH",
    "INBOX",
    "WEBHOOK_URL",
    "WEBHOOK_SECRET",
    "APP_NAME",
    "FAULTS",
    "LEASE_SECONDS",
    "REFUND_APPROVAL_THRESHOLD",
    "PURCHASE_ORDER_APPROVAL_THRESHOLD",
    "APPROVAL_EXPIRES_IN",
    "REFUND_APPROVAL_EXPIRES_IN",
    "PURCHASE_ORDER_APPROVAL_EXPIRES_IN",
    "SEPARATION_OF_DUTIES",
    "APPROVAL_REMIND_AT",
    "APPROVAL_ESCALATE_AT",
    "REFUND_QUORUM_AMOUNT",
    "REFUND_QUORUM",
    "PURCHASE_ORDER_QUORUM_AMOUNT",
    "PURCHASE_ORDER_QUORUM",
    "VIGILATOR_API_KEY",
    "VIGILATOR_BASE_URL",
    "VIGILATOR_TIMEOUT",
    "VIGILATOR_RETRIES",
    "VIGILATOR_RETRY_BASE_SECONDS",
    "VIGILATOR_CONCURRENCY",
)


def settings_to_clear() -> list[str]:
    return [*ENV_NAMES, *(k for k in os.environ if k.startswith("ANTHROPIC_"))]


@contextmanager
def fresh_database(kind: str, tmp_path: Path, pg_base: str | None) -> Iterator[dict[str, str]]:
    """A new empty database; yields the environment that points the worker at it."""
    if kind == "sqlite":
        yield {"SQLITE_PATH": str(tmp_path / "approvals.db")}
        return
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield {"DATABASE_URL": _schema_url(pg_base, schema)}
    finally:
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path, monkeypatch) -> Iterator[str]:
    """Point DATABASE_URL/SQLITE_PATH at a fresh database for this test; return the backend."""
    for name in settings_to_clear():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # so no stray .env or approvals.db is picked up
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with fresh_database(request.param, tmp_path, pg) as env:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        yield request.param


@pytest.fixture
def store(backend):
    from store.db import open_store

    with open_store() as s:
        yield s


@pytest.fixture
def runner(store):
    from agent.runner import Runner

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
