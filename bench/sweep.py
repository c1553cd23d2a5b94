"""Section 4: one recovery sweep over many waiting runs of which a few are answered.

The answered runs are made through the real path (start, then answer in the local inbox), so
their checkpoints are genuine; the unanswered bulk (deadlines a week out, reminders half-way,
so the ladder and expiry queries meet them and find nothing due) is inserted with one
``INSERT ... SELECT`` per table, copying a real waiting row's request, because only the answered
ones are ever resumed. The floor is claiming and resuming as many other runs by id, in the same
database: what a sweep costs beyond that is the cost of finding them. Sweep and floor alternate
over a few rounds and the ratio is the median of theirs, as the load drifts.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.common import (
    DECISION,
    Figure,
    Section,
    StatementCounter,
    fresh_database,
    median,
    waiting_runs,
)
from testkit.databases import environment as environ
from testkit.decide import claim
from worker.decisions import Applied

TARGET_RATIO = 1.15  # issue 16: a sweep costs little more than resuming its answered runs
IDLE_SWEEPS = 7
IDLE_TARGET = 1.5  # 100x the waiting runs, about the same idle sweep
ROUNDS = 3  # sweep and floor alternate; the ratio is the median of the rounds' ratios

BULK_REQUESTS = """
INSERT INTO inbox_requests (id, external_id, dedupe_key, title, description, request,
                            args_schemas, status, created_at)
SELECT 'bulk-' || g, 'approval-worker:bulk_' || g, 'bulk_' || g || '-bench', :title,
       :description, :request, :args_schemas, 'pending', :now - g
FROM generate_series(1, :n) AS g
"""

BULK_RUNS = """
INSERT INTO runs (thread_id, workflow, status, input, interrupt_id, graph_interrupt_ids,
                  request, attempts, created_at, updated_at, expires_at, ladder_at)
SELECT 'bulk_' || g, 'refund', 'waiting', :input, 'bulk-' || g, :graph_interrupt_ids, :request,
       1, :now - g, :now - g, :now + 604800, :now - g + 0.5 * (604800 + g)
FROM generate_series(1, :n) AS g
"""

TEMPLATE = """
SELECT r.input, r.graph_interrupt_ids, r.request, i.title, i.description, i.args_schemas
FROM runs r JOIN inbox_requests i ON i.id = r.interrupt_id
WHERE r.thread_id = :thread_id
"""


def _bulk_waiting(db, count: int, template_thread: str) -> None:
    row = db.one(TEMPLATE, {"thread_id": template_thread})
    now = time.time() - 3600  # older than the answered runs: the sweep meets them first
    with db.transaction() as tx:
        tx.execute(BULK_REQUESTS, {**row, "n": count, "now": now})
        tx.execute(BULK_RUNS, {**row, "n": count, "now": now})
    db.execute("ANALYZE runs")
    db.execute("ANALYZE inbox_requests")


def _sweep(runner, answered: int) -> None:
    outcomes = runner.sweep()
    done = sum(o.status == "done" for o in outcomes)
    if done != answered or len(outcomes) != answered:
        raise RuntimeError(f"sweep resumed {done} of {answered} answered runs")


def _by_id(runner, runs: list[tuple[str, str]]) -> None:

    for tid, iid in runs:
        claimed = claim(runner, tid, iid, DECISION, "bench")
        if not isinstance(claimed, Applied) or runner.resume_claimed(claimed.run).status != "done":
            raise RuntimeError(f"floor run {tid} was not resumed to done")


def _profiled_sweep(runner, answered: int) -> str:
    from pyinstrument import Profiler

    waiting_runs(runner, answered, "sw_profiled", answered=True)
    profiler = Profiler(interval=0.0005)
    profiler.start()
    runner.sweep()
    profiler.stop()
    return profiler.output_text(unicode=False, color=False)


def _one_size(tmp: Path, pg_base: str, waiting: int, answered: int, profile: bool) -> dict:
    from store.db import open_store
    from worker.runner import Runner

    with fresh_database("postgres", tmp, pg_base) as env, environ(env), open_store() as store:
        runner = Runner(store)
        # warm the graph, the pool and the caches, as a long-lived sweeper would be
        for tid, iid in waiting_runs(runner, 2 if answered >= 10 else 1, "sw_warm", answered=True):
            claimed = claim(runner, tid, iid, DECISION, "bench")
            if isinstance(claimed, Applied):
                runner.resume_claimed(claimed.run)
        template = waiting_runs(runner, 1, "sw_template", answered=True)
        runner.sweep()
        _bulk_waiting(store.db, waiting - answered, template[0][0])
        idle = []  # a sweep with nothing answered or due: what finding nothing costs
        for _ in range(IDLE_SWEEPS):
            t0 = time.perf_counter()
            if runner.sweep():
                raise RuntimeError("an idle sweep did something")
            idle.append(time.perf_counter() - t0)
        sweep_times, floor_times, ratios = [], [], []
        for rnd in range(ROUNDS):
            # answered in the inbox, for the sweep to find; started only, for the floor to claim
            # by id (a sweep would take answered ones); the order alternates every round
            waiting_runs(runner, answered, f"sw_swept{rnd}", answered=True)
            direct = waiting_runs(runner, answered, f"sw_direct{rnd}")
            sides = [
                ("sweep", lambda: _sweep(runner, answered)),
                ("floor", lambda d=direct: _by_id(runner, d)),
            ]
            timed = {}
            for name, fn in sides if rnd % 2 == 0 else reversed(sides):
                with StatementCounter() as count:
                    t0 = time.perf_counter()
                    fn()
                    timed[name] = (time.perf_counter() - t0, count)
            sweep_times.append(timed["sweep"][0])
            floor_times.append(timed["floor"][0])
            ratios.append(timed["sweep"][0] / timed["floor"][0])
            if rnd == 0:
                sweep_count, floor_count = timed["sweep"][1], timed["floor"][1]
        # the profile is of another sweep of as many answered runs: a sampling profiler slows
        # what it watches, so it never runs while either side is timed
        text = _profiled_sweep(runner, answered) if profile else None
        left = store.db.one("SELECT count(*) AS n FROM runs WHERE status = 'waiting'")["n"]
        if left != waiting - answered:
            raise RuntimeError(f"{left} runs left waiting, expected {waiting - answered}")
    return {
        "sweep_s": median(sweep_times),
        "floor_s": median(floor_times),
        "ratio": median(ratios),
        "idle_s": median(idle),
        "ratios": ratios,
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
                r["ratio"],
                f"<= {TARGET_RATIO:g}x",
                r["ratio"] <= TARGET_RATIO,
                f"{r['sweep_statements']} statements ({per_answered:.1f} per answered run) vs "
                f"{r['floor_statements']} resuming them by id",
            )
        )
        section.details.append(
            f"- {waiting:,} waiting, {answered} answered, {ROUNDS} rounds: per-round ratios "
            f"{', '.join(f'{x:.2f}' for x in r['ratios'])}; median sweep {r['sweep_s']:.3f} s, "
            f"{r['sweep_statements']} statements ({r['sweep_round_trips']} round trips counting "
            f"BEGIN/COMMIT); median floor (claim + resume as many by id) "
            f"{r['floor_s']:.3f} s, {r['floor_statements']} statements "
            f"({r['floor_round_trips']} round trips); idle sweep {r['idle_s'] * 1000:.2f} ms"
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
        section.figures.append(
            Figure(
                "sweep",
                f"idle sweep (nothing answered or due), {largest:,} against {min(sizes):,} waiting",
                big["idle_s"] * 1000,
                small["idle_s"] * 1000,
                "ms",
                big["idle_s"] / small["idle_s"],
                f"<= {IDLE_TARGET:g}x (flat)",
                big["idle_s"] / small["idle_s"] <= IDLE_TARGET,
                f"median of {IDLE_SWEEPS}; every listing is an index range",
            )
        )
    smallest = by_size[min(sizes)]
    section.facts.update(
        {
            "idle_ms_small": smallest["idle_s"] * 1000,
            "idle_ms_large": by_size[largest]["idle_s"] * 1000,
            "waiting_small": min(sizes),
            "waiting_large": largest,
            "statements_small": smallest["sweep_statements"] - smallest["floor_statements"],
        }
    )
    section.profile = by_size[largest]["profile"]
    return section
