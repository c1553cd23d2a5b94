"""Fixtures: every test runs against SQLite and a real Postgres, each in a fresh namespace.

Postgres tests use ``TEST_DATABASE_URL`` (default: the local ``test`` database). They skip when
the server is unreachable, unless ``REQUIRE_POSTGRES=1`` (set by CI), where they fail instead.
Each test gets its own Postgres schema through ``search_path``, so tests never see each other.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import pytest

from testkit import zygote
from testkit.databases import (
    DEFAULT_PG,
    ROOT,
    TEST_RATE_LIMITS,
    fresh_database,
    settings_to_clear,
)

PG_URL = os.environ.get("TEST_DATABASE_URL", DEFAULT_PG)

# Some machines (this project's CI among them) set PYTHONDONTWRITEBYTECODE=1: then every process
# the suite starts (hundreds) compiles the product and its libraries from source again, which
# was a quarter of the suite's CPU. The suite writes bytecode as any checkout does (git-ignored).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


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


@pytest.fixture
def clock():
    """A settable now (``testkit.clock``), for the stores and runners a test builds."""
    from testkit.clock import Clock

    return Clock()


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """One headless Debian chromium per module (each test opens its own contexts).

    Not per session: Playwright's sync API leaves its event loop marked running on the main
    thread until it stops, so a later module's ``asyncio.run`` (the LangGraph async client
    tests) would fail with "cannot be called from a running event loop".
    """
    from testkit.web import CHROMIUM

    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"CI needs Debian's chromium at {CHROMIUM} (.ci/run installs it)")
        pytest.skip(f"no browser at {CHROMIUM}: apt-get install chromium to run the page tests")
    playwright_sync = pytest.importorskip("playwright.sync_api")
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def run_cli(
    *args: str, timeout: float = 60, check_rc: int | None = 0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run an entry script (``run.py``, ``recover.py``, ``-m inbox``) as a real process (forked
    from the zygote, ``testkit.zygote``), with ``env`` besides this process's environment (a bad
    setting for the child only: set here, an in-process runner's threads would read it too)."""
    cmd = [sys.executable, *(["-m", "inbox"] if args[0] == "inbox" else [str(ROOT / args[0])])]
    proc = zygote.run(
        [*cmd, *args[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)},
    )
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def pytest_sessionfinish(session, exitstatus):
    """No secret in any log line of the whole suite: every server and command log the tests
    wrote (under pytest's temporary folder) is searched for the canary secret the worker
    processes hold, and for the test webhook secrets."""
    zygote.stop()  # this process's fork server, if it started one
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller searches every worker's folder, below its own
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


# -- tiers ---------------------------------------------------------------------------------------
# Every test gets its tier markers at collection, from what it uses, so no module has to keep a
# list in step: ``postgres`` (the Postgres half of ``backend``, or ``postgres_url``), ``browser``
# (Chromium), ``process`` (it or one of its fixtures starts uvicorn, an entry script or another
# subprocess), ``build`` (image replay, SAM, manifests, the recipes, the previous release, the
# docs site, the bench smoke run).
# ``slow`` is set by hand on the few long tests. The fast loop: ``-m "not process and not build
# and not browser"`` (CONTRIBUTING).
_PROCESS_CALLS = ("start_server(", "run_cli(", "subprocess.", "Popen(", "uvicorn_command(")
_PROCESS_CALLS += ("zygote.",)  # testkit.zygote's popen and run start real processes too
_BROWSER_CALLS = ("browser", "chromium", "playwright")
_BUILD_MODULES = {
    "test_image",
    "test_lambda_build",
    "test_deploy",
    "test_docs",
    "test_bench",
    "test_systemd_recipe",
    "test_previous_release",
}


def _source(obj: object) -> str:
    import inspect

    try:
        return inspect.getsource(obj)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return ""


def _helpers(module: object, body: str, text) -> str:
    """The sources of the module's and testkit's functions that ``body`` calls, two calls deep
    (a test that starts its process through a helper is a process test too)."""
    import inspect
    import re

    seen: set[str] = set()
    found = ""
    frontier = body
    for _ in range(2):
        more = ""
        for name in set(re.findall(r"\b([a-z_][a-z0-9_]*)\(", frontier)) - seen:
            seen.add(name)
            obj = getattr(module, name, None)
            owner = getattr(obj, "__module__", "") or ""
            if inspect.isfunction(obj) and (
                owner == getattr(module, "__name__", None) or owner.startswith("testkit")
            ):
                more += text(obj)
        found += more
        frontier = more
    return found


def pytest_collection_modifyitems(config, items):
    sources: dict[object, str] = {}

    def text(obj: object) -> str:
        if obj not in sources:
            sources[obj] = _source(obj)
        return sources[obj]

    for item in items:
        funcs = [getattr(item, "function", None)]
        info = getattr(item, "_fixtureinfo", None)
        names = set(info.names_closure) if info is not None else set()
        if info is not None:
            funcs += [d.func for defs in info.name2fixturedefs.values() for d in defs]
        body = "\n".join(text(f) for f in funcs if f is not None)
        body += _helpers(item.module, body, text)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "postgres_url" in names or params.get("backend") == "postgres":
            item.add_marker(pytest.mark.postgres)
        if "browser" in names or any(word in body for word in _BROWSER_CALLS):
            item.add_marker(pytest.mark.browser)
        if any(call in body for call in _PROCESS_CALLS):
            item.add_marker(pytest.mark.process)
        if item.module is not None and item.module.__name__ in _BUILD_MODULES:
            item.add_marker(pytest.mark.build)
    # The order in which pytest-xdist hands out whole files (``--dist loadfile``, with
    # ``--no-loadscope-reorder`` in pyproject.toml): files with a build or load test first, as
    # one of those (a minute or more) handed out last would run alone while the other workers
    # have finished; then files with more tests first (xdist's own order). Stable: a file's
    # tests keep their order.
    heavy = {
        item.path
        for item in items
        if any(item.iter_markers("build")) or any(item.iter_markers("slow"))
    }
    count = Counter(item.path for item in items)
    items.sort(key=lambda item: (item.path not in heavy, -count[item.path]))


@pytest.fixture
def anchor_keys(tmp_path):
    """An Ed25519 anchor key pair in the test's folder (``testkit.anchoring``)."""
    from testkit.anchoring import make_keys

    return make_keys(tmp_path / "keys")
