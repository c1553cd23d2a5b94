"""Section 9: what a decision and a waiting approval cost, end to end, on Postgres.

Decision to done: a signed webhook answering a waiting run, sent at a steady rate to ``uvicorn
webhook:app``, until the run's row says ``done`` (its ``updated_at``, written by the server's
clock on the same machine); the floor is raw LangGraph resuming the same graph
(``invoke(Command(resume))``) in the same database. Cost of waiting: the bytes a waiting run
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
TARGETS = {50: 1.3, 99: 1.5}  # issue 26: decision to done against raw resume, p50 / p99
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
    from bench.throughput import _raw_resume, _raw_start
    from inbox import external_id
    from store.db import open_store
    from worker.runner import Runner

    section = Section("decision")
    tag = uuid.uuid4().hex[:6]
    with fresh_database("postgres", tmp, pg_base) as db_env:
        with environ(db_env), open_store() as store:
            runner = Runner(store)
            graph = runner.graph("refund")
            waiting = []
            threads_before = 0
            starts = StatementCounter()
            for i in range(count + 2):
                tid = f"dec_{tag}_{i}"
                with starts if i else contextlib.nullcontext():
                    outcome = runner.start(REQUEST_TEXT, thread_id=tid)
                if outcome.status != "waiting":
                    raise RuntimeError(f"setup run {tid} ended {outcome.status}")
                waiting.append((tid, outcome.interrupt_id))
                if i == 0:  # after the process's one lease thread exists
                    threads_before = threading.active_count()
            per_start = _per(starts, count + 1)
            per_decision = _decide_in_process(runner, tag, 10)
            threads_after = threading.active_count()
            tids = [t for t, _ in waiting]
            ext = [external_id(t) for t in tids]
            per_table = {
                table: _bytes(store.db, table, col, ext if col == "external_id" else tids)
                / len(tids)
                for table, col in WORKER_TABLES
            }
            raw_ids = [f"raw_{tag}_{i}" for i in range(raw_runs + 2)]
            for t in raw_ids:
                _raw_start(graph, t)
            raw_bytes = sum(_bytes(store.db, t, c, raw_ids) for t, c in RAW_TABLES) / len(raw_ids)
            raw_times = []
            for t in raw_ids:
                t0 = time.perf_counter()
                _raw_resume(graph, t)
                raw_times.append(time.perf_counter() - t0)
            raw_times = raw_times[2:]  # the first ones warm the pool and the graph
        server = start_server("webhook:app", child_env(db_env), tmp / "decision.log")
        try:
            with environ(db_env), open_store() as store:
                warm, todo = waiting[:2], waiting[2:]
                reqs = [signed_request(PATH, answered_body(i, t), f"d_{t}") for t, i in warm]
                open_loop(server.port, reqs, 5)
                reqs = [signed_request(PATH, answered_body(i, t), f"d_{t}") for t, i in todo]
                shots = open_loop(server.port, reqs, rate)
                if {s.status for s in shots} != {202}:
                    raise RuntimeError(f"deliveries got {sorted({s.status for s in shots})}")
                done = _wait_done(store.db, [t for t, _ in todo], 120)
        finally:
            server.stop()
    latency = [(done[t] - s.sent_at) * 1000 for (t, _), s in zip(todo, shots, strict=True)]
    raw_ms = [x * 1000 for x in raw_times]
    for p in (50, 99):
        w, f = percentile(latency, p), percentile(raw_ms, p)
        target = TARGETS[p]
        section.figures.append(
            Figure(
                "decision",
                f"decision to done p{p}, signed webhook @ {rate:g}/s",
                w,
                f,
                "ms",
                w / f,
                f"<= {target:g}x",
                w / f <= target,
                f"floor: raw invoke(Command(resume)) p{p}, same graph and database",
            )
        )
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
            (threads_after - threads_before) / (len(waiting) - 1),
            0.0,
            "",
            float("nan"),
            "0",
            threads_after == threads_before,
            f"{len(waiting) - 1} more runs started in-process: threads {threads_before} -> "
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
            "p50_ms": percentile(latency, 50),
            "p99_ms": percentile(latency, 99),
        }
    )
    section.details += [
        f"- decision to done: {len(todo)} signed deliveries at {rate:g}/s to `uvicorn "
        f"webhook:app` (1 worker), each answering a different waiting run; p50 "
        f"{percentile(latency, 50):.1f} ms, p99 {percentile(latency, 99):.1f} ms, max "
        f"{max(latency):.1f} ms; acknowledgement p50 "
        f"{median([s.latency * 1000 for s in shots]):.1f} ms",
        f"- raw resume of the same graph: {len(raw_ms)} runs, p50 {percentile(raw_ms, 50):.1f} "
        f"ms, p99 {percentile(raw_ms, 99):.1f} ms",
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
    return section


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


def _wait_done(db, thread_ids: list[str], timeout: float) -> dict[str, float]:
    """Each run's ``updated_at`` once all of them are done."""
    t0 = time.monotonic()
    sql = "SELECT thread_id, updated_at FROM runs WHERE status = 'done' AND thread_id = ANY(:ids)"
    while time.monotonic() - t0 < timeout:
        rows = db.all(sql, {"ids": thread_ids})
        if len(rows) == len(thread_ids):
            return {r["thread_id"]: r["updated_at"] for r in rows}
        time.sleep(0.05)
    raise RuntimeError(f"resumes not all done {timeout:.0f}s after the last delivery")
