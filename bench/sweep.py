"""Section 4: one recovery sweep over many waiting runs of which a few are answered.

The answered runs are made through the real path (start, then answer in the local inbox), so
their checkpoints are genuine; the unanswered bulk (deadlines a week out, so the ladder and
expiry queries meet them too) is inserted with one ``INSERT ... SELECT``
per table, copying a real waiting row's request, because only the answered ones are ever
resumed. The floor is claiming and resuming the same number of answered runs by id, in the same
database: what a sweep costs beyond that is the cost of finding them.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.common import (
    DECISION,
    REQUEST_TEXT,
    Figure,
    Section,
    StatementCounter,
    environ,
    fresh_database,
)
from worker.refusals import Refused

TARGET_RATIO = 1.15  # issue 16: a sweep costs little more than resuming its answered runs

BULK_REQUESTS = """
INSERT INTO inbox_requests (id, external_id, dedupe_key, title, description, request,
                            args_schemas, status, created_at)
SELECT 'bulk-' || g, 'approval-worker:bulk_' || g, 'bulk_' || g || '-bench', :title,
       :description, :request, :args_schemas, 'pending', :now - g
FROM generate_series(1, :n) AS g
"""

BULK_RUNS = """
INSERT INTO runs (thread_id, workflow, status, input, interrupt_id, graph_interrupt_ids,
                  request, attempts, created_at, updated_at, expires_at)
SELECT 'bulk_' || g, 'refund', 'waiting', :input, 'bulk-' || g, :graph_interrupt_ids, :request,
       1, :now - g, :now - g, :now + 604800
FROM generate_series(1, :n) AS g
"""

TEMPLATE = """
SELECT r.input, r.graph_interrupt_ids, r.request, i.title, i.description, i.args_schemas
FROM runs r JOIN inbox_requests i ON i.id = r.interrupt_id
WHERE r.thread_id = :thread_id
"""


def _answered(runner, count: int, tag: str) -> list[tuple[str, str]]:
    """``count`` runs started for real and answered in the local inbox, not yet resumed."""
    out = []
    for i in range(count):
        tid = f"sw_{tag}_{i}"
        outcome = runner.start(REQUEST_TEXT, thread_id=tid)
        if outcome.status != "waiting":
            raise RuntimeError(f"setup run {tid} ended {outcome.status}: {outcome.error}")
        runner.inbox.answer(outcome.interrupt_id, DECISION["decisions"], "bench")
        out.append((tid, outcome.interrupt_id))
    return out


def _bulk_waiting(db, count: int, template_thread: str) -> None:
    row = db.one(TEMPLATE, {"thread_id": template_thread})
    now = time.time() - 3600  # older than the answered runs: the sweep meets them first
    with db.transaction() as tx:
        tx.execute(BULK_REQUESTS, {**row, "n": count, "now": now})
        tx.execute(BULK_RUNS, {**row, "n": count, "now": now})
    db.execute("ANALYZE runs")
    db.execute("ANALYZE inbox_requests")


def _profiled_sweep(runner, answered: int) -> str:
    from pyinstrument import Profiler

    _answered(runner, answered, "profiled")
    profiler = Profiler(interval=0.0005)
    profiler.start()
    runner.sweep()
    profiler.stop()
    return profiler.output_text(unicode=False, color=False)


def _one_size(tmp: Path, pg_base: str, waiting: int, answered: int, profile: bool) -> dict:
    from store.db import open_store
    from store.runs import new_owner
    from worker.runner import Runner

    with fresh_database("postgres", tmp, pg_base) as env, environ(env), open_store() as store:
        runner = Runner(store)
        # warm the graph, the pool and the caches, as a long-lived sweeper would be
        for tid, iid in _answered(runner, 2 if answered >= 10 else 1, "warm"):
            owner = new_owner("bench")
            runner.claim(tid, iid, DECISION, owner)
            runner.resume(tid, owner)
        swept = _answered(runner, answered, "swept")
        _bulk_waiting(store.db, waiting - answered, swept[0][0])
        with StatementCounter() as sweep_count:
            t0 = time.perf_counter()
            outcomes = runner.sweep()
            sweep_s = time.perf_counter() - t0
        done = sum(o.status == "done" for o in outcomes)
        if done != answered or len(outcomes) != answered:
            raise RuntimeError(f"sweep resumed {done} of {answered} answered runs")
        # the floor: the same number of answered runs, claimed and resumed by id
        direct = _answered(runner, answered, "direct")
        approvals = runner.inbox.get_many([iid for _, iid in direct])
        with StatementCounter() as floor_count:
            t0 = time.perf_counter()
            for tid, iid in direct:
                owner = new_owner("bench")
                claimed = runner.claim(tid, iid, approvals[iid].resume_value(), owner)
                if not isinstance(claimed, Refused):
                    runner.resume(tid, owner, claimed)
            floor_s = time.perf_counter() - t0
        # the profile is of another sweep of as many answered runs: a sampling profiler slows
        # what it watches, so it never runs while either side is timed
        text = _profiled_sweep(runner, answered) if profile else None
        left = store.db.one("SELECT count(*) AS n FROM runs WHERE status = 'waiting'")["n"]
        if left != waiting - answered:
            raise RuntimeError(f"{left} runs left waiting, expected {waiting - answered}")
    return {
        "sweep_s": sweep_s,
        "floor_s": floor_s,
        "sweep_statements": sweep_count.statements,
        "sweep_round_trips": sweep_count.round_trips,
        "floor_statements": floor_count.statements,
        "floor_round_trips": floor_count.round_trips,
        "profile": text,
    }


def measure(tmp: Path, pg_base: str, sizes: list[int], answered: int, profile: bool) -> Section:
    section = Section("sweep")
    largest = max(sizes)
    by_size = {w: _one_size(tmp, pg_base, w, answered, profile and w == largest) for w in sizes}
    for waiting, r in by_size.items():
        per_answered = r["sweep_statements"] / answered
        section.figures.append(
            Figure(
                "sweep",
                f"one sweep, {waiting:,} waiting / {answered} answered",
                r["sweep_s"],
                r["floor_s"],
                "s",
                r["sweep_s"] / r["floor_s"],
                f"<= {TARGET_RATIO:g}x",
                r["sweep_s"] / r["floor_s"] <= TARGET_RATIO,
                f"{r['sweep_statements']} statements ({per_answered:.1f} per answered run) vs "
                f"{r['floor_statements']} resuming them by id",
            )
        )
        section.details.append(
            f"- {waiting:,} waiting, {answered} answered: sweep {r['sweep_s']:.3f} s, "
            f"{r['sweep_statements']} statements ({r['sweep_round_trips']} round trips counting "
            f"BEGIN/COMMIT); the floor (claim + resume the same number by id) "
            f"{r['floor_s']:.3f} s, {r['floor_statements']} statements "
            f"({r['floor_round_trips']} round trips)"
        )
    if len(sizes) > 1:
        small, big = by_size[min(sizes)], by_size[largest]
        extra_small = small["sweep_statements"] - small["floor_statements"]
        extra_big = big["sweep_statements"] - big["floor_statements"]
        grows = extra_big > extra_small
        section.figures.append(
            Figure(
                "sweep",
                f"statements beyond the floor, {min(sizes):,} -> {largest:,} waiting",
                extra_big,
                extra_small,
                "stmts",
                (extra_big / extra_small) if extra_small else float("nan"),
                "flat in waiting",
                not grows,
                f"sweep {small['sweep_statements']} -> {big['sweep_statements']} statements",
            )
        )
    section.profile = by_size[largest]["profile"]
    return section
