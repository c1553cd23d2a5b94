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
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

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
# Postgres's WAL counters since its last reset (cluster-wide: the bench is the machine's only
# writer while it runs): ``wal_sync`` is the flushes every commit waits on
WAL = "SELECT wal_records, wal_write, wal_sync FROM pg_stat_wal"
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


def grouped(url: str, delay_us: int, siblings: int) -> str:
    """``url`` whose sessions set Postgres's group commit: a commit waits ``delay_us`` for
    others to share its WAL flush when at least ``siblings`` other transactions are open
    (a superuser's setting, given at connect as ``options``; the server's own stays as it is)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    extra = f"-ccommit_delay={delay_us} -ccommit_siblings={siblings}"
    query["options"] = f"{query.get('options', '')} {extra}".strip()
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))  # libpq: %20, not +


def _race(
    tmp: Path,
    pg_base: str,
    runs: int,
    workers: int,
    sweepers: int,
    interval: float,
    group_commit: tuple[int, int] | None = None,
) -> dict:
    """``runs`` answered runs, each delivered twice to ``workers`` uvicorn processes while
    ``sweepers`` sweepers poll: how long until all are done, the exactly-once counts, and the
    WAL flushes it took; with ``group_commit`` (delay in us, siblings), the served processes'
    sessions commit in groups."""
    from store.db import open_store
    from worker.runner import Runner

    with fresh_database("postgres", tmp, pg_base) as db_env:
        with environ(db_env), open_store() as store:
            pending = waiting_runs(Runner(store), runs, "so", answered=True)
        served = dict(db_env)
        if group_commit:
            served["DATABASE_URL"] = grouped(db_env["DATABASE_URL"], *group_commit)
        env = child_env(served)
        log_name = f"scale-{workers}w{sweepers}s" + ("-grouped" if group_commit else "")
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
                t0, cpu0, wal0 = time.perf_counter(), cpu_seconds(), store.db.one(WAL)
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
                wal1 = store.db.one(WAL)
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
        "wal": {k: (wal1[k] - wal0[k]) / runs for k in wal0},
        "group_commit": group_commit,
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
    group_commit: tuple[int, int] = (0, 5),
) -> Section:
    """The race at ``workers`` + ``sweepers``, against two floors: the same race served by one
    uvicorn process and no sweeper, and section 1's in-process path (no HTTP at all); then,
    when ``group_commit`` sets a delay, the same race again with the served processes' commits
    grouped, against the same floors."""
    section = Section("scale")
    one = _race(tmp, pg_base, runs, 1, 0, interval)
    many = _race(tmp, pg_base, runs, workers, sweepers, interval)
    races = [(one, 1, 0), (many, workers, sweepers)]
    if group_commit[0] > 0:
        grouped_race = _race(tmp, pg_base, runs, workers, sweepers, interval, group_commit)
        races.append((grouped_race, workers, sweepers))
    if reference is None:  # section 1 did not run: take its full path here, same db
        from store.db import open_store
        from worker.runner import Runner

        with fresh_database("postgres", tmp, pg_base) as db_env, environ(db_env):
            with open_store() as store:
                reference = _reference(Runner(store), max(10, runs // 20))
        reference_of = "the (1) full path measured here, one process, no HTTP"
    else:
        reference_of = "section 1's full path on Postgres, one process, no HTTP"
    cores = os.cpu_count() or 1
    for race, _, _ in races[1:]:
        label = f"{workers} uvicorn workers + {sweepers} sweepers, {runs} answered runs"
        if race["group_commit"]:
            label += ", commit_delay {} us, commit_siblings {}".format(*race["group_commit"])
        for name, floor in (
            ("the same race, 1 uvicorn worker, no sweeper", one["throughput"]),
            (reference_of, reference),
        ):
            ratio = race["throughput"] / floor
            section.figures.append(
                Figure(
                    "scale",
                    f"{label}, against {name}",
                    race["throughput"],
                    floor,
                    "runs/s",
                    ratio,
                    ">= 1.6x, all done exactly once",  # issues 16 and 26
                    race["exactly_once"] and one["exactly_once"] and ratio >= 1.6,
                    f"{race['elapsed']:.1f} s; refunds {race['refunds']['refunds']} for "
                    f"{race['refunds']['runs']} runs; claims {race['claims']['claims']}; "
                    f"WAL flushes per run {race['wal']['wal_sync']:.1f} (1 worker: "
                    f"{one['wal']['wal_sync']:.1f}); 1 worker kept {one['busy']:.2f} of {cores} "
                    f"cores busy, so this machine leaves at most "
                    f"{cores / max(one['busy'], 0.01):.2f}x",
                )
            )
    for r, w, s in races:
        grouped_by = r["group_commit"]
        section.details.append(
            f"- {w} worker(s) + {s} sweeper(s)"
            + (
                " with commit_delay {} us and commit_siblings {} in their sessions".format(
                    *grouped_by
                )
                if grouped_by
                else ""
            )
            + f": {runs} runs, each delivered twice "
            f"({r['deliveries']} signed deliveries, 8 connections) to `uvicorn webhook:app "
            f"--workers {w}`"
            + (f" while {s} `recover.py --wait --interval {interval:g}` sweepers ran" if s else "")
            + f"; all done in {r['elapsed']:.2f} s "
            f"({r['throughput']:.1f} runs/s, {r['busy']:.2f} of {cores} cores busy "
            f"machine-wide); WAL per run (pg_stat_wal): {r['wal']['wal_sync']:.1f} flushes, "
            f"{r['wal']['wal_write']:.1f} writes, {r['wal']['wal_records']:.0f} records; "
            f"ledger: {r['refunds']['refunds']} refunds over "
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
