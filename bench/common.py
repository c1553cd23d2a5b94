"""What every benchmark shares: throwaway databases, the worker's environment, statistics.

Each section gets its own Postgres schema (through ``search_path``, as the tests do) or SQLite
file, dropped afterwards, so a run never sees another run's rows and never leaves any behind.
"""

from __future__ import annotations

import base64
import os
import platform
import statistics
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from testkit.databases import DEFAULT_PG, ROOT, worker_env
from testkit.databases import fresh_database as testkit_fresh_database
from testkit.decide import answer

SECRET = "whsec_" + base64.b64encode(b"bench-secret-for-webhooks-32byte").decode()
LOCAL_SECRET = "whsec_" + base64.b64encode(b"bench-secret-for-local-inbox-32b").decode()
REQUEST_TEXT = "Refund order A-1001: the kettle arrived broken"
# A one-cent partial refund: A-1001's total (49.90) covers thousands of them, so every run the
# bench starts still proposes a refund and pauses (the ledger refuses one past the order total).
CENT = {"order_id": "A-1001", "amount": 0.01, "reason": "bench"}
DECISION = {
    "decisions": [{"type": "edit", "edited_action": {"name": "issue_refund", "args": CENT}}]
}
LOCAL_HOSTS = ("127.0.0.1", "localhost")
__all__ = ["DEFAULT_PG", "ROOT"]  # re-exported for the sections


class BenchError(Exception):
    """A setup problem the user can fix (printed as one line)."""


def check_local(url: str) -> str:
    """The bench only ever talks to this machine: refuse a DATABASE_URL pointing elsewhere."""
    host = urlsplit(url).hostname or ""
    if host not in LOCAL_HOSTS:
        raise BenchError(
            f"the bench only talks to 127.0.0.1; DATABASE_URL points at {host!r}. "
            "Unset it or point it at a local Postgres."
        )
    return url


@contextmanager
def fresh_database(kind: str, tmp: Path, pg_base: str) -> Iterator[dict[str, str]]:
    """A new empty database for one section, dropped afterwards."""
    with testkit_fresh_database(kind, tmp, pg_base, prefix="bench") as env:
        yield env


def child_env(db_env: dict[str, str], **extra: str) -> dict[str, str]:
    """The environment of a worker process (uvicorn, run.py, recover.py) on ``db_env``."""
    secrets = {"VIGILATOR_WEBHOOK_SECRET": SECRET, "WEBHOOK_SECRET": LOCAL_SECRET}
    return worker_env(db_env, **{**secrets, **extra})


# -- statistics -------------------------------------------------------------------------------


def waiting_runs(runner, count: int, prefix: str, answered: bool = False) -> list[tuple[str, str]]:
    """``count`` runs started through the worker and paused on their approval, as
    ``(thread_id, interrupt_id)``; with ``answered``, also approved on the inbox command line
    (handed off, so a sweep takes them up), not yet resumed."""
    out = []
    for i in range(count):
        tid = f"{prefix}_{i}"
        outcome = runner.start(REQUEST_TEXT, thread_id=tid)
        if outcome.status != "waiting":
            raise RuntimeError(f"setup run {tid} ended {outcome.status}: {outcome.error}")
        if answered:
            answer(runner, outcome.interrupt_id, DECISION["decisions"], "bench")
        out.append((tid, outcome.interrupt_id))
    return out


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile: an observed value, never an interpolated one."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))  # ceil without floats drifting
    return ordered[int(rank) - 1]


@dataclass
class Figure:
    """One line of the results table: the worker's number, the floor's, and the target."""

    section: str
    name: str
    measured: float
    floor: float
    unit: str
    ratio: float
    target: str
    met: bool | None
    note: str = ""


@dataclass
class Section:
    name: str
    figures: list[Figure] = field(default_factory=list)
    details: list[str] = field(default_factory=list)  # markdown lines for RESULTS.md
    profile: str | None = None  # pyinstrument text, when a target was missed
    profile_of: str = ""
    facts: dict[str, float] = field(default_factory=dict)  # named numbers CAPACITY.md uses


# -- statement counting -------------------------------------------------------------------------


class StatementCounter:
    """Counts SQL statements sent through psycopg (every pool connection, the checkpointer's
    too), since pg_stat_statements needs a server restart to load and this box is shared."""

    def __init__(self) -> None:
        self.statements = 0
        self.transactions = 0
        self._lock = threading.Lock()
        self._saved: list[tuple[Any, str, Any]] = []

    def _bump(self, attr: str, by: int = 1) -> None:
        with self._lock:
            setattr(self, attr, getattr(self, attr) + by)

    def __enter__(self) -> StatementCounter:
        import psycopg

        counter = self
        execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany
        enter = psycopg.Transaction.__enter__

        def counted_execute(cur, query, params=None, *args, **kwargs):
            counter._bump("statements")
            return execute(cur, query, params, *args, **kwargs)

        def counted_executemany(cur, query, params_seq, *args, **kwargs):
            params_seq = list(params_seq)
            counter._bump("statements", len(params_seq))
            return executemany(cur, query, params_seq, *args, **kwargs)

        def counted_enter(tx):
            counter._bump("transactions")
            return enter(tx)

        self._saved = [
            (psycopg.Cursor, "execute", execute),
            (psycopg.Cursor, "executemany", executemany),
            (psycopg.Transaction, "__enter__", enter),
        ]
        psycopg.Cursor.execute = counted_execute
        psycopg.Cursor.executemany = counted_executemany
        psycopg.Transaction.__enter__ = counted_enter
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in self._saved:
            setattr(owner, name, original)

    @property
    def round_trips(self) -> int:
        """Statements plus each transaction's BEGIN and COMMIT."""
        return self.statements + 2 * self.transactions


# -- the machine -------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def postgres_version(pg_base: str) -> str:
    import psycopg

    try:
        with psycopg.connect(pg_base, connect_timeout=3) as conn:
            return conn.execute("SHOW server_version").fetchone()[0]
    except psycopg.Error as exc:
        return f"unreachable ({str(exc).strip().splitlines()[0] if str(exc).strip() else exc})"


def package_versions(names: tuple[str, ...]) -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in names:
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} (not installed)")
    return ", ".join(out)


def cpu_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every core (``/proc/stat``):
    two readings give how many cores a phase kept busy, whoever used them (servers, Postgres,
    the load generator)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])
    return (total - idle) / hz, total / hz


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` and every living descendant
    (``/proc/<pid>/stat``): what a server and its resumer processes spent, whatever else the
    machine ran meanwhile. A descendant that exited between two readings is not counted."""
    hz = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited while listed
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / hz
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, parent in parents.items() if parent == p and c not in tree]
    return sum(used.get(p, 0.0) for p in tree)


def cores_busy(before: tuple[float, float], after: tuple[float, float]) -> float:
    """Cores busy on average between two ``cpu_seconds`` readings."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return (os.cpu_count() or 1) * busy / total if total > 0 else 0.0


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def machine(pg_base: str) -> dict[str, str]:
    return {
        "cpus": str(os.cpu_count()),
        "cpu model": cpu_model(),
        "memory": _memory(),
        "python": f"{platform.python_version()} ({sys.executable})",
        "postgres": postgres_version(pg_base),
        "sqlite": __import__("sqlite3").sqlite_version,
        "packages": package_versions(
            (
                "langgraph",
                "langgraph-checkpoint-postgres",
                "langgraph-checkpoint-sqlite",
                "psycopg",
                "fastapi",
                "uvicorn",
                "svix",
            )
        ),
        "git": _git_head(),
    }


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError):
        pass
    return "unknown"


def _git_head() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
