"""Section 6: several webhook processes and sweepers racing over one Postgres.

Every answered run is delivered to the uvicorn workers twice (a Svix redelivery keeps the
``svix-id``), in shuffled order, while ``recover.py --wait`` sweepers poll the same runs from the
inbox. Exactly-once is then checked where it matters, downstream and in the audit trail: one
refund per run in the ledger, one ``decision claimed`` event per run, every run ``done``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from bench.common import (
    DECISION,
    ROOT,
    Figure,
    Section,
    child_env,
    cores_busy,
    cpu_seconds,
    fresh_database,
    waiting_runs,
)
from bench.http import answered_body, send_all, signed_request, start_server
from testkit.databases import environment as environ
from testkit.decide import claim
from worker.decisions import Applied

PATH = "/webhooks/vigilator"

DONE_COUNT = "SELECT count(*) AS n FROM runs WHERE status = 'done' AND thread_id LIKE 'so_%'"
NOT_DONE = "SELECT count(*) AS n FROM runs WHERE status <> 'done' AND thread_id LIKE 'so_%'"
REFUNDS_PER_RUN = """
SELECT count(*) AS runs, coalesce(sum(n), 0) AS refunds, coalesce(max(n), 0) AS most
FROM (SELECT thread_id, count(*) AS n FROM refunds WHERE thread_id LIKE 'so_%'
      GROUP BY thread_id) AS per_run
"""
CLAIMS_PER_RUN = """
SELECT count(*) AS runs, coalesce(sum(n), 0) AS claims, coalesce(max(n), 0) AS most
FROM (SELECT thread_id, count(*) AS n FROM run_events
      WHERE reason = 'decision claimed' AND thread_id LIKE 'so_%' GROUP BY thread_id) AS per_run
"""
CLAIMERS = """
SELECT split_part(actor, '@', 1) AS role, count(*) AS n FROM run_events
WHERE reason = 'decision claimed' AND thread_id LIKE 'so_%' GROUP BY 1 ORDER BY 1
"""


def _reference(runner, count: int) -> float:
    """Sequential claim + resume throughput of ``count`` extra runs (runs/s)."""

    ready = waiting_runs(runner, count, "ref")
    t0 = time.perf_counter()
    for tid, iid in ready:
        claimed = claim(runner, tid, iid, DECISION, "bench")
        if isinstance(claimed, Applied):
            runner.resume_claimed(claimed.run)
    return count / (time.perf_counter() - t0)


def _race(tmp: Path, pg_base: str, runs: int, workers: int, sweepers: int, interval: float) -> dict:
    """``runs`` answered runs, each delivered twice to ``workers`` uvicorn processes while
    ``sweepers`` sweepers poll: how long until all are done, and the exactly-once counts."""
    from store.db import open_store
    from worker.runner import Runner

    with fresh_database("postgres", tmp, pg_base) as db_env:
        with environ(db_env), open_store() as store:
            pending = waiting_runs(Runner(store), runs, "so", answered=True)
        env = child_env(db_env)
        log_name = f"scale-{workers}w{sweepers}s"
        server = start_server("webhook:app", env, tmp / f"{log_name}.log", workers=workers)
        deliveries = [
            signed_request(PATH, answered_body(iid, tid), f"msg_{tid}") for tid, iid in pending
        ]
        deliveries = deliveries * 2
        random.Random(7).shuffle(deliveries)
        procs: list[subprocess.Popen] = []
        logs = []
        try:
            with environ(db_env), open_store() as store:
                t0, cpu0 = time.perf_counter(), cpu_seconds()
                for k in range(sweepers):
                    log = open(tmp / f"{log_name}-sweeper-{k}.log", "w")  # noqa: SIM115
                    logs.append(log)
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, str(ROOT / "recover.py"), "--wait"]
                            + ["--interval", str(interval)],
                            env=env,
                            cwd=str(tmp),
                            stdout=log,
                            stderr=subprocess.STDOUT,
                        )
                    )
                statuses = send_all(server.port, deliveries, concurrency=8)
                deadline = time.monotonic() + max(120.0, runs * 0.5)
                while store.db.one(DONE_COUNT)["n"] < runs:
                    if time.monotonic() > deadline:
                        raise RuntimeError("scale-out runs not all done before the deadline")
                    time.sleep(0.05)
                elapsed, busy = time.perf_counter() - t0, cores_busy(cpu0, cpu_seconds())
                for proc in procs:
                    proc.wait(timeout=max(60.0, interval * 10))
                refunds = store.db.one(REFUNDS_PER_RUN)
                claims = store.db.one(CLAIMS_PER_RUN)
                claimers = {r["role"]: r["n"] for r in store.db.all(CLAIMERS)}
                stuck = store.db.one(NOT_DONE)["n"]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for log in logs:
                log.close()
            server.stop()
    exactly_once = (
        refunds["runs"] == runs
        and refunds["refunds"] == runs
        and refunds["most"] == 1
        and claims["runs"] == runs
        and claims["claims"] == runs
        and claims["most"] == 1
        and stuck == 0
    )
    return {
        "elapsed": elapsed,
        "busy": busy,
        "throughput": runs / elapsed,
        "exactly_once": exactly_once,
        "refunds": refunds,
        "claims": claims,
        "claimers": claimers,
        "stuck": stuck,
        "codes": {c: statuses.count(c) for c in sorted(set(statuses))},
        "deliveries": len(deliveries),
    }


def measure(
    tmp: Path,
    pg_base: str,
    *,
    runs: int,
    workers: int,
    sweepers: int,
    interval: float,
    reference: float | None,
) -> Section:
    """The race at ``workers`` + ``sweepers``, against two floors: the same race served by one
    uvicorn process and no sweeper, and section 1's in-process path (no HTTP at all)."""
    section = Section("scale")
    one = _race(tmp, pg_base, runs, 1, 0, interval)
    many = _race(tmp, pg_base, runs, workers, sweepers, interval)
    if reference is None:  # section 1 did not run: take its full path here, same db
        from store.db import open_store
        from worker.runner import Runner

        with fresh_database("postgres", tmp, pg_base) as db_env, environ(db_env):
            with open_store() as store:
                reference = _reference(Runner(store), max(10, runs // 20))
        reference_of = "the (1) full path measured here, one process, no HTTP"
    else:
        reference_of = "section 1's full path on Postgres, one process, no HTTP"
    label = f"{workers} uvicorn workers + {sweepers} sweepers, {runs} answered runs"
    cores = os.cpu_count() or 1
    for name, floor in (
        ("the same race, 1 uvicorn worker, no sweeper", one["throughput"]),
        (reference_of, reference),
    ):
        ratio = many["throughput"] / floor
        section.figures.append(
            Figure(
                "scale",
                f"{label}, against {name}",
                many["throughput"],
                floor,
                "runs/s",
                ratio,
                ">= 1.6x, all done exactly once",  # issues 16 and 26
                many["exactly_once"] and one["exactly_once"] and ratio >= 1.6,
                f"{many['elapsed']:.1f} s; refunds {many['refunds']['refunds']} for "
                f"{many['refunds']['runs']} runs; claims {many['claims']['claims']}; "
                f"1 worker kept {one['busy']:.2f} of {cores} cores busy, so this machine "
                f"leaves at most {cores / max(one['busy'], 0.01):.2f}x",
            )
        )
    for r, w, s in ((one, 1, 0), (many, workers, sweepers)):
        section.details.append(
            f"- {w} worker(s) + {s} sweeper(s): {runs} runs, each delivered twice "
            f"({r['deliveries']} signed deliveries, 8 connections) to `uvicorn webhook:app "
            f"--workers {w}`"
            + (f" while {s} `recover.py --wait --interval {interval:g}` sweepers ran" if s else "")
            + f"; all done in {r['elapsed']:.2f} s "
            f"({r['throughput']:.1f} runs/s, {r['busy']:.2f} of {os.cpu_count()} cores busy "
            f"machine-wide); ledger: {r['refunds']['refunds']} refunds over "
            f"{r['refunds']['runs']} runs (most for one run: {r['refunds']['most']}); audit "
            f"trail: {r['claims']['claims']} `decision claimed` events over "
            f"{r['claims']['runs']} runs (most: {r['claims']['most']}); claimed by "
            f"{r['claimers']}; not done: {r['stuck']}; HTTP statuses {r['codes']}"
        )
    section.facts.update(
        {
            "ratio": many["throughput"] / one["throughput"],
            "busy_one": one["busy"],
            "workers": workers,
            "sweepers": sweepers,
            "runs": runs,
            "exactly_once": float(many["exactly_once"]),
        }
    )
    section.details.append(f"- in-process floor: {reference_of}, {reference:.1f} runs/s")
    return section
