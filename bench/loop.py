"""Section 10: the event loop stays free while resumes run, on Postgres.

One ``uvicorn webhook:app`` (1 worker) with ``FAULTS=resume.start=sleep:2``: five page decisions
and an operator's Retry, posted at once, each resume a graph that sleeps 2 s; ``GET /healthz``
is timed one call after another on a kept-alive connection until all six have finished. The
floor is the same call on the same server with nothing else running. A resume on the event loop
would stall a call for the whole sleep; in the thread pool it costs a little CPU and the GIL.
"""

from __future__ import annotations

from pathlib import Path

from bench.common import Figure, Section, child_env, fresh_database, percentile
from bench.http import start_server
from testkit.loop import idle_healthz, set_scene, slow_resumes

SLEEP = 2.0
TARGET_MS = 100.0  # issue 20: /healthz keeps answering in under 100 ms


def measure(tmp: Path, pg_base: str, reps: int, decisions: int = 5) -> Section:
    section = Section("loop")
    busy: list[float] = []
    idle: list[float] = []
    windows = []
    with fresh_database("postgres", tmp, pg_base) as db_env:
        env = child_env(db_env, FAULTS=f"resume.start=sleep:{SLEEP:g}")
        server = start_server("webhook:app", env, tmp / "loop.log")
        try:
            for rep in range(reps):
                idle += idle_healthz(server.url, 100)
                scene = set_scene(server.url, db_env, decisions, tag=f"b{rep}")
                window = slow_resumes(scene)
                if window.replies != [202] * decisions + [303]:
                    raise RuntimeError(f"page posts answered {window.replies}")
                busy += window.healthz
                windows.append(window)
        finally:
            server.stop()
    busy_ms, idle_ms = [x * 1000 for x in busy], [x * 1000 for x in idle]
    for p in (50, 99):
        w, f = percentile(busy_ms, p), percentile(idle_ms, p)
        section.figures.append(
            Figure(
                "loop",
                f"/healthz p{p} while {decisions + 1} resumes sleep {SLEEP:g} s",
                w,
                f,
                "ms",
                w / f,
                f"< {TARGET_MS:.0f} ms",
                w < TARGET_MS,
                "floor: /healthz on the same server, idle",
            )
        )
    section.details += [
        f"- {reps} windows of {decisions} page decisions and 1 Retry posted at once to `uvicorn "
        f"webhook:app` (1 worker, Postgres), each resume sleeping {SLEEP:g} s at "
        f"`resume.start`; windows lasted {', '.join(f'{w.seconds:.1f}' for w in windows)} s",
        f"- /healthz while resuming: {len(busy_ms)} calls, p50 {percentile(busy_ms, 50):.1f} ms, "
        f"p99 {percentile(busy_ms, 99):.1f} ms, max {max(busy_ms):.1f} ms",
        f"- /healthz idle: {len(idle_ms)} calls, p50 {percentile(idle_ms, 50):.1f} ms, "
        f"p99 {percentile(idle_ms, 99):.1f} ms, max {max(idle_ms):.1f} ms",
    ]
    return section
