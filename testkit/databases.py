"""Throwaway databases and the environment that points the worker at them."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from urllib.parse import quote

from core.settings import SETTINGS

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


def settings_to_clear() -> list[str]:
    """Every setting the worker reads, and any ``ANTHROPIC_*`` (a developer's shell or ``.env``
    must not change what a test or a benchmark exercises)."""
    names = [s.name for s in SETTINGS]
    return [*names, *(k for k in os.environ if k.startswith("ANTHROPIC_") and k not in names)]


def schema_url(base: str, schema: str) -> str:
    """``base`` with ``search_path`` set to ``schema``: a private namespace in a shared database."""
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}')}"


@contextmanager
def fresh_database(
    kind: str, tmp: Path, pg_base: str | None, prefix: str = "t"
) -> Iterator[dict[str, str]]:
    """A new empty database (removed afterwards); yields the settings that point at it."""
    if kind == "sqlite":
        path = tmp / f"{prefix}_{uuid.uuid4().hex[:8]}.db"
        try:
            yield {"SQLITE_PATH": str(path)}
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        return
    import psycopg

    assert pg_base is not None
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield {"DATABASE_URL": schema_url(pg_base, schema)}
    finally:
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


# A secret every worker process of the tests holds (it signs nothing unless NOTIFY_URLS is set):
# the suite's last step greps every log it wrote for it (tests/conftest.py).
CANARY = "whsec_" + base64.b64encode(b"canary-secret-never-in-any-log!!").decode()


# The suite's own traffic comes from one address and a few keys, far faster than people: the
# per-caller limits are raised for it (the tests of the limits set their own).
TEST_RATE_LIMITS = {
    "RATE_LIMIT_RUNS": "100000/1m",
    "RATE_LIMIT_DECISIONS": "100000/1m",
    "RATE_LIMIT_LOGINS": "100000/1m",
}


# What the tests' servers run with besides the product's defaults, each unless a test is about
# it and sets its own:
# - resumes on the app's own threads (``RESUME_PROCESSES=0``): a resumer process costs about
#   0.9 s of CPU at each Postgres server start, and the suite is CPU-bound; the decision path
#   and the one resumer are the same (tests/test_resumers.py and the cross-process trace in
#   tests/test_tracing.py ask for resumer processes; tests/test_shutdown.py has the defaults);
# - a Slack press waits for its decision as long as Slack allows (``SLACK_ACK_SECONDS=2.5``):
#   with the default 0.3 s, a decision slowed by a loaded machine is answered ``acknowledged``
#   and decided after, which a test that reads the press's outcome from its answer would read
#   as something else (tests/test_slack_ack.py sets 0.3 and is about that).
TEST_SERVER = {"RESUME_PROCESSES": "0", "SLACK_ACK_SECONDS": "2.5"}


def worker_env(db_env: dict[str, str], **extra: str) -> dict[str, str]:
    """The environment of a worker process (uvicorn, run.py, recover.py) on ``db_env``."""
    cleared = set(settings_to_clear())
    env = {k: v for k, v in os.environ.items() if k not in cleared}
    base = {"PYTHONPATH": str(ROOT), "NOTIFY_SECRET": CANARY, **TEST_RATE_LIMITS}
    return {**env, **base, **db_env, **extra}


@contextmanager
def environment(values: dict[str, str], clear: Iterable[str] | None = None) -> Iterator[None]:
    """The worker reads its settings from the environment: ``values`` set (and the ``clear``
    names, every setting by default, unset) for a moment, then all restored."""
    names = list(settings_to_clear() if clear is None else clear)
    saved = {k: os.environ.get(k) for k in {*names, *values}}
    for name in names:
        os.environ.pop(name, None)
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def pointed_at(db_env: dict[str, str]) -> AbstractContextManager[None]:
    """This process's settings pointed at ``db_env`` for a moment (to open its store)."""
    return environment(db_env, clear=("DATABASE_URL", "SQLITE_PATH"))


def api_key(
    db_env: dict[str, str],
    name: str,
    *roles: str,
    groups: tuple[str, ...] = (),
    email: str | None = None,
) -> dict[str, str]:
    """A new API key in that database; the ``Authorization`` header that sends it."""
    from store.db import open_store
    from store.keys import KeyStore, parse_groups, parse_roles

    with pointed_at(db_env), open_store() as store:
        keys = KeyStore(store.db)
        _, token = keys.create(name, parse_roles(list(roles)), parse_groups(groups), email)
    return {"authorization": f"Bearer {token}"}
