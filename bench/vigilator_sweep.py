"""How long a recovery sweep over many waiting runs takes against a slow Vigilator.

Seeds N waiting runs (SQLite in a temporary directory) whose interrupts live on the local fake
Vigilator (testkit/fake_vigilator.py), makes the fake add a fixed delay to every request, and times
``Runner.sweep()``: one query for the waiting runs plus one ``GET api/interrupts/{id}`` each,
``VIGILATOR_CONCURRENCY`` at a time. The floor is delay x N / concurrency.

    uv run python -m bench.vigilator_sweep                      # 1,000 runs, 20 ms, 16 at a time
    uv run python -m bench.vigilator_sweep --concurrency 1      # the sequential baseline (~20 s)
    uv run python bench/vigilator_sweep.py --runs 5000 --delay-ms 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="waiting runs to sweep")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="added to every request")
    parser.add_argument("--concurrency", type=int, default=16, help="VIGILATOR_CONCURRENCY")
    parser.add_argument("--repeat", type=int, default=3, help="sweeps to time")
    args = parser.parse_args()

    from testkit.fake_vigilator import API_KEY, FakeVigilator
    from testkit.vigilator_seed import seed_waiting_runs

    tmp = Path(tempfile.mkdtemp(prefix="vigilator-sweep-"))
    with FakeVigilator() as fake:
        for name in ("DATABASE_URL", "FAULTS", "WEBHOOK_URL"):
            os.environ.pop(name, None)
        os.environ.update(
            SQLITE_PATH=str(tmp / "approvals.db"),
            INBOX="vigilator",
            VIGILATOR_API_KEY=API_KEY,
            VIGILATOR_BASE_URL=fake.url,
            VIGILATOR_CONCURRENCY=str(args.concurrency),
        )
        from store.db import open_store
        from worker.runner import Runner

        with open_store() as store:
            seed_waiting_runs(store.db, fake, args.runs)
            runner = Runner(store)
            fake.delay = args.delay_ms / 1000
            runner.sweep()  # warm up: connections, imports
            times, peaks = [], []
            for _ in range(args.repeat):
                fake.stats.max_in_flight = 0
                started = time.perf_counter()
                resumed = runner.sweep()
                times.append(time.perf_counter() - started)
                peaks.append(fake.stats.max_in_flight)
                assert resumed == [], "nothing was answered, so nothing resumes"
    floor = args.delay_ms / 1000 * args.runs / args.concurrency
    best, median = min(times), statistics.median(times)
    print(
        f"{args.runs} waiting runs, {args.delay_ms:g} ms per request, concurrency "
        f"{args.concurrency}: sweep best {best:.2f} s, median {median:.2f} s "
        f"(floor {floor:.2f} s, best {best / floor:.2f}x floor; sequential would be "
        f"{args.delay_ms / 1000 * args.runs:.1f} s); at most {max(peaks)} requests in flight"
    )


if __name__ == "__main__":
    main()
