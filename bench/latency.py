"""Section 3: webhook acknowledgement latency at a fixed rate, against a bare verifying endpoint.

(a) duplicates of an event whose run is already claimed: the worker verifies, parses, reads
the run and answers ``200 ignored``. (b) each delivery answers a different waiting run, so it
claims it, answers ``202`` and hands the resume to its resumer process (``RESUME_PROCESSES``, 1 on
Postgres by default; with 0 the resume runs on threads of the same process, which compete with
later acknowledgements for the interpreter). The worker runs on Postgres, the floor touches no
database; both get the same uvicorn flags, and repetitions alternate between them.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

from bench.common import (
    Figure,
    Section,
    child_env,
    fresh_database,
    median,
    percentile,
    waiting_runs,
)
from bench.http import Server, answered_body, open_loop, signed_request, start_server
from testkit.databases import environment as environ

PATH = "/webhooks/vigilator"
TARGETS = {"ignored": 1.5, "resume": 2.0}  # issues 16 and 26


def _stats(shots) -> dict[str, float]:
    lat = [s.latency * 1000 for s in shots]
    return {
        "p50": percentile(lat, 50),
        "p99": percentile(lat, 99),
        "max": max(lat),
        "late_p99": percentile([s.late * 1000 for s in shots], 99),
    }


def _wait_done(db, thread_ids: list[str], timeout: float) -> float:
    """Seconds until every run in ``thread_ids`` is done (the resumes kept up), bounded."""
    t0 = time.monotonic()
    marks = ", ".join(f":t{i}" for i in range(len(thread_ids)))
    params = {f"t{i}": t for i, t in enumerate(thread_ids)}
    sql = f"SELECT count(*) AS n FROM runs WHERE status = 'done' AND thread_id IN ({marks})"
    while time.monotonic() - t0 < timeout:
        if db.one(sql, params)["n"] == len(thread_ids):
            return time.monotonic() - t0
        time.sleep(0.05)
    raise RuntimeError(f"background resumes not all done {timeout:.0f}s after the last delivery")


def measure(
    tmp: Path,
    pg_base: str,
    *,
    rate_ignored: float,
    rate_resume: float,
    duration: float,
    duration_resume: float,
    reps: int,
    profile: str = "missed",
) -> Section:
    from store.db import open_store
    from worker.runner import Runner

    section = Section("webhook")
    n_ignored = max(1, int(rate_ignored * duration))
    n_resume = max(1, int(rate_resume * duration_resume))
    results: dict[tuple[str, str], list[dict]] = {}
    drains: list[float] = []
    statuses: dict[str, set[int]] = {}
    with fresh_database("postgres", tmp, pg_base) as db_env:
        with environ(db_env), open_store() as store:  # set up the schema before any server
            runner = Runner(store)
            claimed_tid, claimed_iid = waiting_runs(runner, 1, "lat_claimed")[0]
            extra = n_resume if profile != "never" else 0
            backlog = waiting_runs(
                runner, n_resume * reps + 2 + extra, f"lat_{uuid.uuid4().hex[:6]}"
            )
        env = child_env(db_env)
        worker = start_server("webhook:app", env, tmp / "worker.log")
        floor = start_server("bench.floor_app:app", env, tmp / "floor.log")
        try:
            with environ(db_env), open_store() as store:
                # the original delivery claims the run; every later one is its duplicate
                original = signed_request(PATH, answered_body(claimed_iid, claimed_tid), "msg_0")
                first = open_loop(worker.port, [original], 1.0)[0]
                if first.status != 202:
                    raise RuntimeError(f"first delivery got {first.status}: {first.body[:200]}")
                _wait_done(store.db, [claimed_tid], 60)
                warm = backlog[:2]
                _phase(worker, [signed_request(PATH, answered_body(i, t), t) for t, i in warm], 5)
                _wait_done(store.db, [t for t, _ in warm], 60)
                todo = backlog[2:]
                for rep in range(reps):
                    order = [("worker", worker), ("floor", floor)]
                    if rep % 2:
                        order.reverse()
                    dup = [signed_request(PATH, answered_body(claimed_iid, claimed_tid), "msg_0")]
                    dup *= n_ignored
                    for name, server in order:
                        shots = _phase(server, dup, rate_ignored)
                        results.setdefault(("ignored", name), []).append(_stats(shots))
                        statuses.setdefault(f"ignored/{name}", set()).update(
                            s.status for s in shots
                        )
                    batch, todo = todo[:n_resume], todo[n_resume:]
                    reqs = [signed_request(PATH, answered_body(i, t), f"msg_{t}") for t, i in batch]
                    for name, server in order:
                        shots = _phase(server, reqs, rate_resume)
                        results.setdefault(("resume", name), []).append(_stats(shots))
                        statuses.setdefault(f"resume/{name}", set()).update(s.status for s in shots)
                        if name == "worker":
                            drains.append(_wait_done(store.db, [t for t, _ in batch], 120))
                p99 = {k: median([r["p99"] for r in v]) for k, v in results.items()}
                missed = any(
                    p99[(kind, "worker")] > TARGETS[kind] * p99[(kind, "floor")] for kind in TARGETS
                )
                if todo and (profile == "always" or (profile == "missed" and missed)):
                    batch = todo[:n_resume]
                    reqs = [signed_request(PATH, answered_body(i, t), f"msg_{t}") for t, i in batch]
                    section.profile = _py_spy(worker, reqs, rate_resume, tmp)
                    section.profile_of = (
                        f"py-spy on the uvicorn worker during one (b) phase ({len(reqs)} "
                        f"deliveries at {rate_resume:g}/s); inclusive share of samples"
                    )
                    _wait_done(store.db, [t for t, _ in batch], 120)
        finally:
            worker.stop()
            floor.stop()
    _expect(statuses, "ignored/worker", {200})
    _expect(statuses, "resume/worker", {202})
    _expect(statuses, "ignored/floor", {200})
    _expect(statuses, "resume/floor", {200})
    for kind, rate, n in (
        ("ignored", rate_ignored, n_ignored),
        ("resume", rate_resume, n_resume),
    ):
        w, f = _medians(results[(kind, "worker")]), _medians(results[(kind, "floor")])
        ratio = w["p99"] / f["p99"]
        label = "ignored duplicates" if kind == "ignored" else "deliveries starting a resume"
        section.figures.append(
            Figure(
                "webhook",
                f"ack p99, {label} @ {rate:g}/s",
                w["p99"],
                f["p99"],
                "ms",
                ratio,
                f"<= {TARGETS[kind]:g}x",
                ratio <= TARGETS[kind],
                f"p50 {w['p50']:.1f} vs {f['p50']:.1f} ms; max {w['max']:.1f} vs {f['max']:.1f} ms",
            )
        )
        for who in ("worker", "floor"):
            per = results[(kind, who)]
            section.details.append(
                f"- {label}, {who}: {reps} reps x {n} deliveries at {rate:g}/s; "
                f"p50 {_join(per, 'p50')} ms; p99 {_join(per, 'p99')} ms; "
                f"max {_join(per, 'max')} ms; sender lateness p99 {_join(per, 'late_p99')} ms"
            )
    section.details.append(
        f"- background resumes were all done {', '.join(f'{d:.2f}' for d in drains)} s after "
        "each (b) schedule ended (the rate is sustained when this stays near zero)"
    )
    return section


def _phase(server: Server, requests: list[bytes], rate: float):
    return open_loop(server.port, requests, rate)


def _expect(statuses: dict[str, set[int]], key: str, allowed: set[int]) -> None:
    if key in statuses and not statuses[key] <= allowed:
        raise RuntimeError(f"{key}: unexpected status codes {sorted(statuses[key])}")


def _medians(per: list[dict[str, float]]) -> dict[str, float]:
    return {k: median([r[k] for r in per]) for k in per[0]}


def _join(per: list[dict[str, float]], key: str) -> str:
    return ", ".join(f"{r[key]:.1f}" for r in per)


def _py_spy(server: Server, requests: list[bytes], rate: float, tmp: Path) -> str:
    """Sample the worker process while it serves one phase; summarise where its time goes."""
    import shutil
    import subprocess
    import sys

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return "py-spy is not installed (uv sync --dev)"
    out = tmp / "py-spy.txt"
    seconds = int(len(requests) / rate) + 2
    cmd = [spy, "record", "--pid", str(server.proc.pid), "--duration", str(seconds)]
    cmd += ["--format", "raw", "--output", str(out), "--rate", "250", "--nonblocking"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)
    open_loop(server.port, requests, rate)
    try:
        _, err = proc.communicate(timeout=seconds + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return "py-spy did not finish"
    if not out.exists():
        return f"py-spy failed: {err.decode(errors='replace')[-500:]}"
    return summarise_collapsed(out.read_text())


def summarise_collapsed(text: str, top: int = 40) -> str:
    """Inclusive share of samples per function from py-spy's collapsed stacks."""
    totals: dict[str, int] = {}
    samples = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        samples += n
        seen = set()
        for frame in stack.split(";"):
            name = re.sub(r":\d+\)$", ")", frame)  # one row per function, not per line
            if name not in seen:
                seen.add(name)
                totals[name] = totals.get(name, 0) + n
    if not samples:
        return "no samples"
    rows = sorted(totals.items(), key=lambda kv: -kv[1])
    lines = [f"{samples} samples (non-idle threads)"]
    lines += [f"  {100 * n / samples:5.1f}%  {name}" for name, n in rows[:top]]
    return "\n".join(lines)
