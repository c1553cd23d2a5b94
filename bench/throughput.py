"""Sections 1 and 2: the worker's start and resume paths against raw LangGraph on the same graph.

Both sides use the very graph object the runner compiled, over the same checkpointer and
database, so the ratio is exactly what the runs table, the inbox and the extra state reads cost.
Raw and full batches alternate inside each round (and swap order every round), because on a
shared machine the background load drifts over seconds; the ratio is the median of the
per-round ratios, which that drift cancels out of.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from bench.common import (
    DECISION,
    REQUEST_TEXT,
    Figure,
    Section,
    fresh_database,
    median,
)
from testkit.databases import environment as environ
from testkit.decide import claim
from worker.decisions import Applied

TARGET = 0.85  # issue 26 (issue 16 asked 0.9)


def _raw_start(graph, tid: str) -> None:
    from langchain_core.messages import HumanMessage

    out = graph.invoke(
        {"messages": [HumanMessage(REQUEST_TEXT)]},
        {"configurable": {"thread_id": tid}},
        durability="sync",
    )
    if not out.get("__interrupt__"):
        raise RuntimeError(f"raw start of {tid} did not pause")


def _raw_resume(graph, tid: str) -> None:
    from langgraph.types import Command

    out = graph.invoke(
        Command(resume=DECISION), {"configurable": {"thread_id": tid}}, durability="sync"
    )
    if out.get("__interrupt__"):
        raise RuntimeError(f"raw resume of {tid} paused again")


def _full_start(runner, tid: str) -> str:
    outcome = runner.start(REQUEST_TEXT, thread_id=tid)
    if outcome.status != "waiting":
        raise RuntimeError(f"start of {tid} ended {outcome.status}: {outcome.error}")
    return outcome.interrupt_id


def _full_resume(runner, tid: str, interrupt_id: str) -> None:

    claimed = claim(runner, tid, interrupt_id, DECISION, "bench")
    if not isinstance(claimed, Applied):
        raise RuntimeError(f"claim of {tid} refused: {claimed}")
    outcome = runner.resume_claimed(claimed.run)  # as the sweep does: the row is not read again
    if outcome.status != "done":
        raise RuntimeError(f"resume of {tid} ended {outcome.status}: {outcome.error}")


def _interleaved(pairs, n: int) -> tuple[list[float], list[float]]:
    """Seconds per operation for two variants, alternating one op each (order swapped every
    op), so a burst of background load lands on both instead of on one batch."""
    (fa, ia), (fb, ib) = pairs
    ta, tb = [], []
    for i in range(n):
        steps = [(fa, ia[i], ta), (fb, ib[i], tb)]
        for fn, item, out in steps if i % 2 == 0 else reversed(steps):
            t0 = time.perf_counter()
            fn(item)
            out.append(time.perf_counter() - t0)
    return ta, tb


def measure(backend: str, tmp: Path, pg_base: str, n: int, rounds: int) -> dict:
    """Seconds per op, raw and full, for starts and resumes, per round, on a fresh ``backend``."""
    from store.db import open_store
    from worker.runner import Runner

    result = {k: [] for k in ("raw_start", "full_start", "raw_resume", "full_resume")}
    with fresh_database(backend, tmp, pg_base) as env, environ(env), open_store() as store:
        runner = Runner(store)
        graph = runner.graph("refund")
        # warm-up: first calls compile the graph's channels, open pool connections, fill caches
        for i in range(min(3, n)):
            _raw_start(graph, f"warm_raw_{i}")
            _raw_resume(graph, f"warm_raw_{i}")
            _full_resume(runner, f"warm_full_{i}", _full_start(runner, f"warm_full_{i}"))
        for _ in range(rounds):
            tag = uuid.uuid4().hex[:6]
            raw_ids = [f"raw_{tag}_{i}" for i in range(n)]
            full_ids = [f"full_{tag}_{i}" for i in range(n)]
            interrupts: dict[str, str] = {}
            raw, full = _interleaved(
                [
                    (lambda t: _raw_start(graph, t), raw_ids),
                    (lambda t, m=interrupts: m.update({t: _full_start(runner, t)}), full_ids),
                ],
                n,
            )
            result["raw_start"].append(raw)
            result["full_start"].append(full)
            raw, full = _interleaved(
                [
                    (lambda t: _raw_resume(graph, t), raw_ids),
                    (lambda t, m=interrupts: _full_resume(runner, t, m[t]), full_ids),
                ],
                n,
            )
            result["raw_resume"].append(raw)
            result["full_resume"].append(full)
        result["anatomy"] = _anatomy(runner, graph, full_ids[0], n)
        if backend == "postgres":  # psycopg's calls can be counted; the path is the same SQL
            result["counts"] = _counts(runner, graph)
    return result


def _counts(runner, graph) -> dict[str, tuple[int, int]]:
    """Statements and committed transactions of one start and one claim + resume, full and
    raw (``bench.common.StatementCounter``): what the worker's guarantees add, in round trips
    and commits, for the report's ceiling."""
    from bench.common import StatementCounter

    out = {}
    tid = f"count_{uuid.uuid4().hex[:6]}"
    steps = {
        "raw_start": lambda: _raw_start(graph, f"raw_{tid}"),
        "raw_resume": lambda: _raw_resume(graph, f"raw_{tid}"),
        "full_start": lambda: out.update(iid=_full_start(runner, f"full_{tid}")),
        "full_resume": lambda: _full_resume(runner, f"full_{tid}", out["iid"]),
    }
    counts = {}
    for name, step in steps.items():
        with StatementCounter() as counter:
            step()
        counts[name] = (counter.statements, counter.transactions)
    return counts


def _ceiling(kind: str, raw_ms: float, costs: dict[str, float], counts: dict) -> str:
    """What the ratio could reach if the worker's own Python cost nothing: the raw time
    against the raw time plus the statements and commits the full path adds, each at the
    price measured for a run read and a committed write in this run."""
    (fs, ft), (rs, rt) = counts[f"full_{kind}"], counts[f"raw_{kind}"]
    commits, statements = ft - rt, fs - rs
    reads = max(0, statements - 2 * commits)  # a committed write here is two statements
    floor = commits * costs["committed_write"] + reads * costs["run_read"]
    return (
        f"{kind}: {statements} statements and {commits} committed transactions more than raw "
        f"({fs}/{ft} against {rs}/{rt}, counted on Postgres; the same SQL on both backends): at "
        f"this run's prices that is {floor:.2f} ms, so the ratio is at most "
        f"{raw_ms / (raw_ms + floor):.2f} even if the worker's own Python took no time"
    )


def _anatomy(runner, graph, thread_id: str, n: int) -> dict[str, float]:
    """Median milliseconds of the steps the full path adds to raw LangGraph, measured on a
    finished run: so the report can say which of them the gap is made of."""
    from store.runs import new_owner

    config = {"configurable": {"thread_id": thread_id}}
    owner = new_owner("bench")
    steps = {
        "run read (runs.get)": lambda: runner.runs.get(thread_id),
        "committed write (one transition + event)": lambda: runner.runs.record(
            thread_id, owner, "bench: timing a committed write"
        ),
        "checkpoint read (graph.get_state)": lambda: graph.get_state(config),
    }
    out = {}
    for name, fn in steps.items():
        times = []
        for _ in range(max(10, n)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = median(times) * 1000
    return out


def profile_full(backend: str, tmp: Path, pg_base: str, n: int) -> str:
    """pyinstrument over ``n`` full starts then ``n`` full resumes: where the overhead goes."""
    from pyinstrument import Profiler

    from store.db import open_store
    from worker.runner import Runner

    with fresh_database(backend, tmp, pg_base) as env, environ(env), open_store() as store:
        runner = Runner(store)
        _full_resume(runner, "warm", _full_start(runner, "warm"))
        profiler = Profiler(interval=0.0005)
        profiler.start()
        ids = {f"p_{i}": _full_start(runner, f"p_{i}") for i in range(n)}
        for tid, iid in ids.items():
            _full_resume(runner, tid, iid)
        profiler.stop()
        return profiler.output_text(unicode=False, color=False, show_all=False)


def sections(data: dict[str, dict], n: int, rounds: int) -> tuple[Section, Section]:
    resume, start = Section("resume"), Section("start")
    counts = data.get("postgres", {}).get("counts")  # the same SQL on both backends
    for backend, res in data.items():
        costs = {
            key: next(v for k, v in res["anatomy"].items() if k.startswith(step))
            for key, step in (("run_read", "run read"), ("committed_write", "committed write"))
        }
        ceilings = []
        for sec, kind, label in (
            (resume, "resume", "claim + resume to done"),
            (start, "start", "start to recorded pending interrupt"),
        ):
            raw_rounds, full_rounds = res[f"raw_{kind}"], res[f"full_{kind}"]
            raw = [len(r) / sum(r) for r in raw_rounds]  # runs per second, per round
            full = [len(r) / sum(r) for r in full_rounds]
            ratios = [f / r for f, r in zip(full, raw, strict=True)]
            ratio = median(ratios)
            raw_ms = median([x for r in raw_rounds for x in r]) * 1000
            full_ms = median([x for r in full_rounds for x in r]) * 1000
            sec.figures.append(
                Figure(
                    sec.name,
                    f"{kind} throughput, {backend}",
                    median(full),
                    median(raw),
                    "runs/s",
                    ratio,
                    f">= {TARGET}",
                    ratio >= TARGET,
                    f"median {full_ms:.1f} vs {raw_ms:.1f} ms/run (ratio {raw_ms / full_ms:.2f})",
                )
            )
            sec.facts[f"{kind}_ms_{backend}"] = 1000 / median(full)
            sec.details.append(
                f"- {backend}, {label}: {rounds} rounds x {n} runs, raw and full interleaved one "
                f"run at a time; full {', '.join(f'{x:.1f}' for x in full)} runs/s; raw "
                f"{', '.join(f'{x:.1f}' for x in raw)} runs/s; per-round ratios "
                f"{', '.join(f'{x:.2f}' for x in ratios)}; median per run {full_ms:.2f} ms full "
                f"vs {raw_ms:.2f} ms raw"
            )
            if counts:
                ceilings.append(_ceiling(kind, 1000 / median(raw), costs, counts))
        steps = "; ".join(f"{k} {v:.2f} ms" for k, v in res["anatomy"].items())
        resume.facts.update({f"{key}_ms_{backend}": v for key, v in costs.items()})
        resume.details.append(f"- {backend}, cost of the added steps: {steps}")
        resume.details += [f"- {backend}, the guarantees' floor, {c}" for c in ceilings]
    return resume, start
