"""Section 15: this product's ``/lg`` against LangGraph's own ``langgraph dev`` server, with the
same graph (``bench.lg_graph``) and the same ``langgraph-sdk`` client code (``bench.lg_client``).

Each server is started fresh for each concurrency (this product on a fresh database per start,
SQLite and Postgres; ``langgraph dev`` in memory, ``--no-reload``, ``--n-jobs-per-worker`` set to
the concurrency, nothing sent off the machine). A few warm-up runs go start to done; then
``runs`` runs are started and all left waiting on their interrupt, the RSS of the server's
process tree is read before and after (memory per waiting run), then every one is decided.
Runs per second: the runs over both phases' wall time. The floor is ``langgraph dev``: the
target is to lead every figure. ``langgraph-cli`` is in the ``lgserver`` dependency group:
``uv run --group lgserver python -m bench --only lgserver``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.common import BenchError, Figure, Section, child_env, fresh_database, percentile
from bench.http import start_server
from bench.lg_client import Clients, decide_all, start_all
from bench.lg_graph import GRAPH_ID
from testkit.databases import api_key
from testkit.servers import HOST, free_port, process_tree, stop_process

CONFIG = Path(__file__).with_name("langgraph_dev") / "langgraph.json"
WARM = 4
OURS, THEIRS = "product", "langgraph"
# what keeps langgraph dev on this machine: no CLI analytics, no version check, no tracing
OFFLINE = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
}


@dataclass
class Result:
    starts: list[float]  # seconds, start to interrupt
    decisions: list[float]  # seconds, decision to done
    runs_per_s: float
    bytes_per_waiting: float
    rss_before: int
    rss_waiting: int


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and every process under it (a resumer process, a worker)."""
    total = 0
    for p in process_tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


async def _drive(url: str, keys: tuple[str | None, str | None], pid: int, runs: int, c: int):
    clients = Clients(url, *keys)
    try:
        assistant = await clients.assistant(GRAPH_ID)
        warm, _ = await start_all(clients, assistant, WARM, c)
        await decide_all(clients, assistant, warm, c)
        before = tree_rss(pid)
        pending, started = await start_all(clients, assistant, runs, c)
        waiting = tree_rss(pid)
        decided = await decide_all(clients, assistant, pending, c)
    finally:
        await clients.close()
    return Result(
        started.seconds,
        decided.seconds,
        runs / (started.wall + decided.wall),
        (waiting - before) / runs,
        before,
        waiting,
    )


def _ours(backend: str, tmp: Path, pg_base: str, runs: int, c: int) -> Result:
    with fresh_database(backend, tmp, pg_base) as db_env:
        keys = (
            api_key(db_env, "rita", "requester")["authorization"].split()[1],
            api_key(db_env, "bob", "reviewer")["authorization"].split()[1],
        )
        env = child_env(db_env, API_WORKFLOWS=GRAPH_ID)
        server = start_server("webhook:app", env, tmp / f"lg-{backend}-{c}.log")
        try:
            return asyncio.run(_drive(f"{server.url}/lg", keys, server.proc.pid, runs, c))
        finally:
            server.stop()


def langgraph_command() -> str | None:
    found = Path(sys.executable).with_name("langgraph")
    return str(found) if found.exists() else shutil.which("langgraph")


def _theirs(tmp: Path, runs: int, c: int) -> Result:
    command = langgraph_command()
    if command is None:
        raise BenchError(
            "langgraph-cli is not installed: "
            "uv run --group lgserver python -m bench --only lgserver"
        )
    port = free_port()
    workdir = tmp / f"langgraph-dev-{c}"  # its .langgraph_api folder goes here
    workdir.mkdir()
    root = str(CONFIG.parent.parent.parent)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env = {**clean, **OFFLINE, "PYTHONPATH": root}
    argv = [command, "dev", "--config", str(CONFIG), "--host", HOST, "--port", str(port)]
    argv += ["--no-browser", "--no-reload", "--n-jobs-per-worker", str(c)]
    argv += ["--server-log-level", "WARNING"]
    with open(workdir / "server.log", "w") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    try:
        _wait_ok(proc, port, workdir / "server.log")
        return asyncio.run(_drive(f"http://{HOST}:{port}", (None, None), proc.pid, runs, c))
    finally:
        stop_process(proc)


def _wait_ok(proc: subprocess.Popen, port: int, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"langgraph dev exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/ok", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)  # polls until /ok answers (deadline above)
    raise RuntimeError(f"langgraph dev did not answer /ok in {timeout:.0f}s")


def measure(
    tmp: Path,
    pg_base: str,
    backends: list[str],
    *,
    runs: int,
    concurrency: list[int],
    servers: list[str],
    log=print,
) -> Section:
    section = Section("lgserver")
    results: dict[tuple[str, int], Result] = {}
    for c in concurrency:
        if THEIRS in servers:
            log(f"langgraph dev: {runs} runs at concurrency {c}")
            results[(THEIRS, c)] = _theirs(tmp, runs, c)
        if OURS in servers:
            for backend in backends:
                log(f"/lg on {backend}: {runs} runs at concurrency {c}")
                results[(backend, c)] = _ours(backend, tmp, pg_base, runs, c)
    for backend in backends if OURS in servers else []:
        for c in concurrency:
            section.figures += _figures(backend, c, results[(backend, c)], results.get((THEIRS, c)))
    section.details += _details(results, backends if OURS in servers else [], concurrency, runs)
    return section


def _numbers(r: Result) -> dict[str, float]:
    ms = 1000.0
    return {
        "start to interrupt p50": percentile(r.starts, 50) * ms,
        "start to interrupt p99": percentile(r.starts, 99) * ms,
        "decision to done p50": percentile(r.decisions, 50) * ms,
        "decision to done p99": percentile(r.decisions, 99) * ms,
        "runs/s": r.runs_per_s,
        "memory per waiting run": r.bytes_per_waiting,
    }


UNITS = {"runs/s": "runs/s", "memory per waiting run": "B"}


def _figures(backend: str, c: int, ours: Result, theirs: Result | None) -> list[Figure]:
    mine = _numbers(ours)
    floor = _numbers(theirs) if theirs is not None else {}
    out = []
    for name, value in mine.items():
        base = floor.get(name, float("nan"))
        higher = name == "runs/s"
        ratio = value / base if base == base and base else float("nan")
        met = None if base != base else (value > base if higher else value < base)
        out.append(
            Figure(
                "lgserver",
                f"/lg {name}, {backend}, c={c}",
                value,
                base,
                UNITS.get(name, "ms"),
                ratio,
                "> 1x" if higher else "< 1x",
                met,
                "floor: langgraph dev (in memory), same graph and client code",
            )
        )
    return out


def _details(results: dict, backends: list[str], concurrency: list[int], runs: int) -> list[str]:
    columns = [*(f"/lg {b}" for b in backends), "langgraph dev"]
    keys = [*backends, THEIRS]
    lines = [
        f"{runs} runs per server and concurrency (after {WARM} warm-up runs), each started "
        "(thread created, run streamed to its interrupt), all left waiting, then each decided "
        "(run streamed to the end); the same `langgraph-sdk` client code on both servers.",
        "",
        "| figure | c | " + " | ".join(columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for name in _numbers(next(iter(results.values()))):
        for c in concurrency:
            cells = []
            for key in keys:
                r = results.get((key, c))
                cells.append("-" if r is None else _cell(name, _numbers(r)[name]))
            lines.append(f"| {name} | {c} | " + " | ".join(cells) + " |")
    lines.append("")
    for (key, c), r in results.items():
        lines.append(
            f"- {key}, c={c}: server tree RSS {r.rss_before / 2**20:.1f} MiB before, "
            f"{r.rss_waiting / 2**20:.1f} MiB with {runs} waiting"
        )
    return lines


def _cell(name: str, value: float) -> str:
    if name == "runs/s":
        return f"{value:.1f}"
    if name == "memory per waiting run":
        return f"{value / 1024:,.1f} KiB"
    return f"{value:.1f} ms"
