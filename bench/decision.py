"""Section 9: what a decision and a waiting approval cost, end to end.

Decision to done, on Postgres and on SQLite: a signed webhook answering a waiting run, sent at a
steady rate to ``uvicorn webhook:app``, until the run's row says ``done`` (its ``updated_at``,
written by the server's clock on the same machine). A decision that arrives over HTTP cannot be
done sooner than a request is acknowledged plus a resume takes, so the floor is their sum, both
measured here: the same deliveries to an app that only verifies the signature
(``bench.floor_app``), and raw LangGraph resuming the same graph (``invoke(Command(resume))``) in
the same database. Cost of waiting, on Postgres: the bytes a waiting run
keeps (its row, its inbox request, its audit events and its checkpoints), against the raw
graph's checkpoints alone for the same pause, and the processes and threads it keeps alive.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from pathlib import Path

from bench.common import (
    REQUEST_TEXT,
    Figure,
    Section,
    StatementCounter,
    child_env,
    fresh_database,
    median,
    percentile,
    waiting_runs,
)
from bench.http import answered_body, open_loop, signed_request, start_server
from testkit.databases import environment as environ
from testkit.decide import claim
from worker.decisions import Applied

PATH = "/webhooks/vigilator"
# issue 39: decision to done against the verify-only acknowledgement plus raw resume, p50 / p99
TARGETS = {50: 1.2, 99: 1.4}
# (table, column naming the thread): what one waiting run keeps in the database
WORKER_TABLES = [
    ("runs", "thread_id"),
    ("run_events", "thread_id"),
    ("inbox_requests", "external_id"),
    ("checkpoints", "thread_id"),
    ("checkpoint_blobs", "thread_id"),
    ("checkpoint_writes", "thread_id"),
]
RAW_TABLES = WORKER_TABLES[3:]


def _bytes(db, table: str, column: str, keys: list[str]) -> int:
    row = db.one(
        f"SELECT coalesce(sum(pg_column_size(t.*)), 0) AS n FROM {table} t "
        f"WHERE {column} = ANY(:keys)",
        {"keys": keys},
    )
    return int(row["n"])


def measure(tmp: Path, pg_base: str, *, rate: float, count: int, raw_runs: int) -> Section:
    section = Section("decision")
    for kind in ("postgres", "sqlite"):
        lat = _latency(tmp, kind, pg_base, rate=rate, count=count, raw_runs=raw_runs)
        for p in (50, 99):
            ack, raw = percentile(lat["ack_floor"], p), percentile(lat["raw"], p)
            w, f = percentile(lat["done"], p), ack + raw
            section.figures.append(
                Figure(
                    "decision",
                    f"decision to done p{p}, signed webhook @ {rate:g}/s, {kind}",
                    w,
                    f,
                    "ms",
                    w / f,
                    f"<= {TARGETS[p]:g}x",
                    w / f <= TARGETS[p],
                    f"floor: verify-only acknowledgement p{p} {ack:.1f} ms + raw "
                    f"invoke(Command(resume)) p{p} {raw:.1f} ms, same graph and database",
                )
            )
        section.details += [
            f"- {kind}, decision to done: {len(lat['done'])} signed deliveries at {rate:g}/s to "
            f"`uvicorn webhook:app` (1 worker), each answering a different waiting run; p50 "
            f"{percentile(lat['done'], 50):.1f} ms, p99 {percentile(lat['done'], 99):.1f} ms, "
            f"max {max(lat['done']):.1f} ms; its acknowledgement p50 "
            f"{median(lat['ack']):.1f} ms",
            f"- {kind}, the floors: the same deliveries to the verify-only app (`bench.floor_app`"
            f"), acknowledgement p50 {percentile(lat['ack_floor'], 50):.1f} ms, p99 "
            f"{percentile(lat['ack_floor'], 99):.1f} ms; raw resume of the same graph, "
            f"{len(lat['raw'])} runs, p50 {percentile(lat['raw'], 50):.1f} ms, p99 "
            f"{percentile(lat['raw'], 99):.1f} ms",
        ]
        if kind == "postgres":
            section.facts.update(
                {"p50_ms": percentile(lat["done"], 50), "p99_ms": percentile(lat["done"], 99)}
            )
    _costs(section, tmp, pg_base, count, raw_runs)
    return section


def _latency(
    tmp: Path, kind: str, pg_base: str, *, rate: float, count: int, raw_runs: int
) -> dict[str, list[float]]:
    """Milliseconds: decision to done through the served app, its acknowledgements, the
    verify-only app's acknowledgements of the same deliveries, and raw resumes."""
    from bench.throughput import _raw_resume, _raw_start
    from store.db import open_store
    from worker.runner import Runner

    tag = uuid.uuid4().hex[:6]
    with fresh_database(kind, tmp, pg_base) as db_env:
        with environ(db_env), open_store() as store:
            runner = Runner(store)
            graph = runner.graph("refund")
            waiting = waiting_runs(runner, count + 2, f"dec_{kind}_{tag}")
            raw_ids = [f"raw_{kind}_{tag}_{i}" for i in range(raw_runs + 2)]
            raw = []
            for t in raw_ids:
                _raw_start(graph, t)
            for t in raw_ids:
                t0 = time.perf_counter()
                _raw_resume(graph, t)
                raw.append((time.perf_counter() - t0) * 1000)
        env = child_env(db_env)
        floor = start_server("bench.floor_app:app", env, tmp / f"decision-floor-{kind}.log")
        try:
            reqs = [signed_request(PATH, answered_body(i, t), f"f_{t}") for t, i in waiting]
            open_loop(floor.port, reqs[:2], 5)
            floor_shots = open_loop(floor.port, reqs[2:], rate)
        finally:
            floor.stop()
        server = start_server("webhook:app", env, tmp / f"decision-{kind}.log")
        try:
            with environ(db_env), open_store() as store:
                warm, todo = waiting[:2], waiting[2:]
                reqs = [signed_request(PATH, answered_body(i, t), f"d_{t}") for t, i in warm]
                open_loop(server.port, reqs, 5)
                reqs = [signed_request(PATH, answered_body(i, t), f"d_{t}") for t, i in todo]
                shots = open_loop(server.port, reqs, rate)
                if {s.status for s in shots} != {202}:
                    raise RuntimeError(f"deliveries got {sorted({s.status for s in shots})}")
                done = _wait_done(store.tables.runs(), [t for t, _ in todo], 120)
        finally:
            server.stop()
    return {
        "done": [(done[t] - s.sent_at) * 1000 for (t, _), s in zip(todo, shots, strict=True)],
        "ack": [s.latency * 1000 for s in shots],
        "ack_floor": [s.latency * 1000 for s in floor_shots],
        "raw": raw[2:],  # the first ones warm the pool and the graph
    }


def _costs(section: Section, tmp: Path, pg_base: str, count: int, raw_runs: int) -> None:
    """What a waiting run keeps (bytes, threads) and the statements of a start and of a
    decision, on Postgres."""
    from bench.throughput import _raw_start
    from inbox import external_id
    from store.db import open_store
    from worker.runner import Runner

    tag = uuid.uuid4().hex[:6]
    with fresh_database("postgres", tmp, pg_base) as db_env:
        with environ(db_env), open_store() as store:
            runner = Runner(store)
            graph = runner.graph("refund")
            tids = []
            threads_before = 0
            starts = StatementCounter()
            for i in range(count + 2):
                tid = f"cost_{tag}_{i}"
                with starts if i else contextlib.nullcontext():
                    outcome = runner.start(REQUEST_TEXT, thread_id=tid)
                if outcome.status != "waiting":
                    raise RuntimeError(f"setup run {tid} ended {outcome.status}")
                tids.append(tid)
                if i == 0:  # after the process's one lease thread exists
                    threads_before = threading.active_count()
            per_start = _per(starts, count + 1)
            per_decision = _decide_in_process(runner, tag, 10)
            threads_after = threading.active_count()
            ext = [external_id(t) for t in tids]
            per_table = {
                table: _bytes(store.db, table, col, ext if col == "external_id" else tids)
                / len(tids)
                for table, col in WORKER_TABLES
            }
            raw_ids = [f"rawc_{tag}_{i}" for i in range(raw_runs + 2)]
            for t in raw_ids:
                _raw_start(graph, t)
            raw_bytes = sum(_bytes(store.db, t, c, raw_ids) for t, c in RAW_TABLES) / len(raw_ids)
    stored = sum(per_table.values())
    section.figures.append(
        Figure(
            "decision",
            "bytes stored per waiting run",
            stored,
            raw_bytes,
            "B",
            stored / raw_bytes,
            "published",
            None,
            "rows and checkpoints, without indexes; floor: raw checkpoints of the same pause",
        )
    )
    section.figures.append(
        Figure(
            "decision",
            "processes / threads alive per waiting run",
            (threads_after - threads_before) / (len(tids) - 1),
            0.0,
            "",
            float("nan"),
            "0",
            threads_after == threads_before,
            f"{len(tids) - 1} more runs started in-process: threads {threads_before} -> "
            f"{threads_after}; no process is started per run",
        )
    )
    section.facts.update(
        {f"start_{k}": v for k, v in per_start.items()}
        | {f"decision_{k}": v for k, v in per_decision.items()}
        | {
            "bytes_waiting": stored,
            "checkpoint_bytes_waiting": sum(
                b for t, b in per_table.items() if t.startswith("checkpoint")
            ),
        }
    )
    section.details += [
        "- per start to waiting: {statements:.1f} statements, {transactions:.1f} transactions, "
        "{round_trips:.1f} round trips counting BEGIN/COMMIT (pool checks included)".format(
            **per_start
        ),
        "- per decision (claim, then resume to done, as the webhook's background task does, "
        "counted in-process): {statements:.1f} statements, {transactions:.1f} transactions, "
        "{round_trips:.1f} round trips".format(**per_decision),
        "- bytes per waiting run (sum of pg_column_size over its rows): "
        + ", ".join(f"{t} {b:,.0f}" for t, b in per_table.items())
        + f"; raw LangGraph's checkpoints for the same pause {raw_bytes:,.0f}",
    ]


def _per(counter: StatementCounter, n: int) -> dict[str, float]:
    return {
        "statements": counter.statements / n,
        "transactions": counter.transactions / n,
        "round_trips": counter.round_trips / n,
    }


def _decide_in_process(runner, tag: str, n: int) -> dict[str, float]:
    """Statements of a claim and its resume to done, as the webhook's background task runs
    them (counted in this process; the server's own are not visible from here)."""
    from bench.common import DECISION

    pairs = waiting_runs(runner, n, f"decc_{tag}")
    with StatementCounter() as counter:
        for tid, iid in pairs:
            claimed = claim(runner, tid, iid, DECISION, "bench")
            done = isinstance(claimed, Applied) and runner.resume_claimed(claimed.run).status
            if done != "done":
                raise RuntimeError(f"in-process decision on {tid} did not finish")
    return _per(counter, n)


def _wait_done(runs, thread_ids: list[str], timeout: float) -> dict[str, float]:
    """Each run's ``updated_at`` (the server's clock, this machine's) once all are done."""
    t0 = time.monotonic()
    done: dict[str, float] = {}
    while time.monotonic() - t0 < timeout:
        for tid in thread_ids:
            run = done.get(tid) is None and runs.get(tid)
            if run and run.status == "done":
                done[tid] = run.updated_at
        if len(done) == len(thread_ids):
            return done
        time.sleep(0.05)  # polls until every run is done (deadline above)
    raise RuntimeError(f"resumes not all done {timeout:.0f}s after the last delivery")
