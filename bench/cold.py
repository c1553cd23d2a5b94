"""Section 5: cold start of the short-lived entry points against importing LangGraph.

A serverless or cron deployment pays process start-up on every run, so ``run.py`` from exec to
its paused exit is compared with the least a LangGraph program can pay, ``import
langgraph.graph``. Each child is reaped with ``os.wait4``, which gives that child's own peak
RSS; the commands are interleaved per repetition so background load hits them alike. They run
the project's virtualenv interpreter directly (``uv run`` would add its own start-up to both).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import REQUEST_TEXT, ROOT, Figure, Section, child_env, median

TARGET = 1.3
TIME = Path("/usr/bin/time")


def _once(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child, from exec to exit.

    The child is started through ``/usr/bin/time`` when there is one: a child forked straight
    from this (large) process would report this process's RSS as its own peak, since Linux
    carries ``ru_maxrss`` across ``exec``.
    """
    report = cwd / "time.out"
    wrapper = ["/usr/bin/time", "-f", "%M", "-o", str(report)] if TIME.exists() else []
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        wrapper + cmd, env=env, cwd=str(cwd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {proc.returncode}: {err[-1000:]}")
    if wrapper:
        return wall, int(report.read_text().split()[-1]) / 1024
    return wall, usage.ru_maxrss / 1024


_STARTED = "import webhook; from api.app import start; from core.cli import prepare; prepare(); "
_STARTED += "start(webhook.app)()"


def commands(tmp: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    py = sys.executable
    env = child_env({"SQLITE_PATH": str(tmp / "cold.db")})
    cmds = {
        "import langgraph.graph": [py, "-c", "import langgraph.graph"],
        "run.py to paused exit": [py, str(ROOT / "run.py"), REQUEST_TEXT],
        # importing opens nothing; a server pays the import and its start-up (lifespan)
        "webhook:app imported and started": [py, "-c", _STARTED],
    }
    return cmds, env


def measure(tmp: Path, reps: int) -> Section:
    section = Section("cold")
    work = tmp / "cold"
    work.mkdir(exist_ok=True)  # no .env here, and a database that already has its tables
    cmds, env = commands(work)
    for cmd in cmds.values():  # warm the page cache and the .pyc files; create the tables
        _once(cmd, env, work)
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    names = list(cmds)
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            samples[name].append(_once(cmds[name], env, work))
    floor_wall = median([w for w, _ in samples["import langgraph.graph"]])
    floor_rss = median([m for _, m in samples["import langgraph.graph"]])
    for name in names[1:]:
        wall = median([w for w, _ in samples[name]])
        rss = median([m for _, m in samples[name]])
        for what, value, floor, unit in (
            ("wall", wall, floor_wall, "s"),
            ("peak RSS", rss, floor_rss, "MiB"),
        ):
            ratio = value / floor
            section.figures.append(
                Figure(
                    "cold",
                    f"{name}, {what}",
                    value,
                    floor,
                    unit,
                    ratio,
                    f"<= {TARGET}x",
                    ratio <= TARGET,
                    "SQLite, offline model" if name.startswith("run.py") else "WEBHOOK_SECRET set",
                )
            )
    for name, values in samples.items():
        section.details.append(
            f"- {name}: {reps} reps; wall {', '.join(f'{w:.2f}' for w, _ in values)} s; "
            f"peak RSS {', '.join(f'{m:.0f}' for _, m in values)} MiB"
        )
    return section


def import_profile(tmp: Path, limit: int = 25) -> str:
    """``python -X importtime`` of run.py's and webhook's imports: the largest cumulative costs."""
    work = tmp / "cold"
    work.mkdir(exist_ok=True)
    _, env = commands(work)
    out = []
    for label, code in (
        ("run.py (worker.runner)", "import core.cli, worker.runner"),
        ("webhook", "import webhook"),
    ):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            env=env,
            cwd=str(work),
            capture_output=True,
            text=True,
            timeout=120,
        )
        rows = []
        for line in proc.stderr.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            self_us, cum_us, name = line[len("import time:") :].split("|", 2)
            depth = (len(name) - len(name.lstrip()) - 1) // 2
            if depth <= 2:  # the packages and their direct imports, not every leaf module
                rows.append((int(cum_us), "  " * depth + name.strip()))
        top = sorted(rows, reverse=True)
        out.append(f"{label}: top cumulative imports (ms)")
        out += [f"  {cum / 1000:7.1f}  {name}" for cum, name in top[:limit]]
    return "\n".join(out)
