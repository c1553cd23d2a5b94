"""Section 12: what tracing costs on the decision path (issue 38), side by side in one run.

Decision to done as section 9 measures it (a signed webhook answering a waiting run, sent at a
steady rate to ``uvicorn webhook:app`` on Postgres, until the run's row says ``done``), with
tracing off (no ``OTEL_*`` variable) and on (``OTEL_EXPORTER_OTLP_ENDPOINT`` at an OTLP/HTTP
stand-in on 127.0.0.1: the SDK's batch processor and exporter, every span sampled), in
alternating rounds so both see the same machine. Each is also put against section 9's floor,
raw LangGraph resuming the same graph in the same database.

Wall time moves with whatever else the machine runs; the main evidence is the CPU the served
app and its resumer processes spend per decision (``/proc``: user + system of the server's
process tree), which other processes barely move. Each phase's CPU window runs from before its
first delivery until :data:`SETTLE` seconds after its last run is done (longer than the batch
processor's 5 s schedule, so the on phase pays its export inside the window; the off phase
waits as long, idle), and, with tracing on, until the stand-in holds every decision's resume.
"""

from __future__ import annotations

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
    process_tree_cpu,
    waiting_runs,
)
from bench.decision import PATH, _wait_done
from bench.http import answered_body, open_loop, signed_request, start_server
from testkit.databases import environment as environ
from testkit.otlp import collector

TARGET = 1.10  # tracing on against off, p50: nothing measurable beyond the machine's noise
CPU_TARGET = 1.25  # tracing on against off, CPU per decision of the served processes
SETTLE = 6.0  # seconds each phase's CPU window runs past its last run's done


def _exported(got, threads: set[str]) -> bool:
    with got.lock:
        resumed = {
            s.attributes.get("approval_worker.thread_id")
            for s in got.spans
            if s.name == "approval_worker.resume"
        }
    return threads <= resumed


def measure(
    tmp: Path, pg_base: str, *, rate: float, count: int, rounds: int, raw_runs: int
) -> Section:
    from bench.throughput import _raw_resume, _raw_start
    from store.db import open_store
    from worker.runner import Runner

    section = Section("tracing")
    tag = uuid.uuid4().hex[:6]
    per_phase = max(1, count // max(1, rounds))
    latency: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}  # ms per decision, one per phase
    with fresh_database("postgres", tmp, pg_base) as db_env, collector() as (endpoint, got):
        with environ(db_env), open_store() as store:
            runner = Runner(store)
            graph = runner.graph("refund")
            waiting = waiting_runs(runner, 2 * rounds * (per_phase + 2), f"tr_{tag}")
            raw_ids = [f"trraw_{tag}_{i}" for i in range(raw_runs + 2)]
            for t in raw_ids:
                _raw_start(graph, t)
            raw_ms = []
            for t in raw_ids:
                t0 = time.perf_counter()
                _raw_resume(graph, t)
                raw_ms.append((time.perf_counter() - t0) * 1000)
            raw_ms = raw_ms[2:]  # the first ones warm the pool and the graph
        traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "bench"}
        todo = iter(waiting)
        for i in range(2 * rounds):
            mode = "on" if i % 2 else "off"
            extra = traced if mode == "on" else {}
            env = child_env(db_env, **extra)
            server = start_server("webhook:app", env, tmp / f"tracing-{mode}-{i}.log")
            try:
                warm = [next(todo) for _ in range(2)]
                batch = [next(todo) for _ in range(per_phase)]
                reqs = [signed_request(PATH, answered_body(i, t), f"w_{t}") for t, i in warm]
                open_loop(server.port, reqs, 5)
                reqs = [signed_request(PATH, answered_body(i, t), f"d_{t}") for t, i in batch]
                with environ(db_env), open_store() as store:  # the window opens on a quiet app
                    _wait_done(store.tables.runs(), [t for t, _ in warm], 120)
                if mode == "on":  # and, traced, once the warm-up's spans are exported
                    _until(lambda w=warm: _exported(got, {t for t, _ in w}), 60)
                cpu0 = process_tree_cpu(server.proc.pid)
                shots = open_loop(server.port, reqs, rate)
                if {s.status for s in shots} != {202}:
                    raise RuntimeError(f"deliveries got {sorted({s.status for s in shots})}")
                with environ(db_env), open_store() as store:
                    done = _wait_done(store.tables.runs(), [t for t, _ in batch], 120)
                time.sleep(SETTLE)  # the window closes as long after the last done in both modes
                if mode == "on":
                    _until(lambda b=batch: _exported(got, {t for t, _ in b}), 60)
                cpu[mode].append((process_tree_cpu(server.proc.pid) - cpu0) * 1000 / len(batch))
            finally:
                server.stop()  # a traced server exports what it still holds as it stops
            latency[mode] += [
                (done[t] - s.sent_at) * 1000 for (t, _), s in zip(batch, shots, strict=True)
            ]
        spans = len(got.spans)
        exports = len(got.requests)
    floor = percentile(raw_ms, 50)
    cpu_on, cpu_off = median(cpu["on"]), median(cpu["off"])
    section.figures.append(
        Figure(
            "tracing",
            "CPU per decision of the served processes, tracing on vs off",
            cpu_on,
            cpu_off,
            "ms",
            cpu_on / cpu_off,
            f"<= {CPU_TARGET:g}x",
            cpu_on / cpu_off <= CPU_TARGET,
            f"{cpu_on - cpu_off:+.1f} ms; median of the phases; the app and its resumer "
            "processes, /proc user + system",
        )
    )
    for p in (50, 99):
        on, off = percentile(latency["on"], p), percentile(latency["off"], p)
        section.figures.append(
            Figure(
                "tracing",
                f"decision to done p{p}, tracing on vs off",
                on,
                off,
                "ms",
                on / off,
                f"<= {TARGET:g}x" if p == 50 else "published",
                on / off <= TARGET if p == 50 else None,
                f"floor here: the same with tracing off; against raw resume p50 {floor:.1f} ms: "
                f"off {off / floor:.2f}x, on {on / floor:.2f}x",
            )
        )
    section.details += [
        f"- {2 * rounds} alternating phases (off, on, ...) of {per_phase} signed deliveries at "
        f"{rate:g}/s to `uvicorn webhook:app` (1 worker) on Postgres, each answering a different "
        "waiting run; on: `OTEL_EXPORTER_OTLP_ENDPOINT` at an OTLP/HTTP stand-in on 127.0.0.1 "
        "(batch processor, default sampler: every span)",
        f"- tracing off: p50 {percentile(latency['off'], 50):.1f} ms, p99 "
        f"{percentile(latency['off'], 99):.1f} ms; on: p50 {percentile(latency['on'], 50):.1f} "
        f"ms, p99 {percentile(latency['on'], 99):.1f} ms; raw resume p50 {floor:.1f} ms",
        f"- CPU per decision (the app and its resumer processes, user + system, from before "
        f"each phase's first delivery to {SETTLE:g} s after its last done): off "
        + ", ".join(f"{v:.1f}" for v in cpu["off"])
        + " ms; on "
        + ", ".join(f"{v:.1f}" for v in cpu["on"])
        + " ms, by phase",
        f"- the stand-in received {spans} spans in {exports} OTLP/HTTP exports",
    ]
    section.facts.update(
        {
            "off_cpu_ms": cpu_off,
            "on_cpu_ms": cpu_on,
            "off_p50_ms": percentile(latency["off"], 50),
            "on_p50_ms": percentile(latency["on"], 50),
            "spans": float(spans),
        }
    )
    return section


def _until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("the stand-in never received the phase's spans")
        time.sleep(0.1)  # polls until the export arrived (deadline above)
