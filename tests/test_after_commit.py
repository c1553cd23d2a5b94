"""Nothing after a commit strands a run (issue 40): counters are registered once, before any
request or resume can count, whatever the threads of a process do at once."""

from __future__ import annotations

import subprocess
import sys

from testkit.databases import ROOT, worker_env

# The repro: eight threads of one process count for the first time at once.
_RACE = """
import threading
from ops import metrics
{prepare}
barrier = threading.Barrier(8)
def first_use():
    barrier.wait()
    metrics.transition("x")
threads = [threading.Thread(target=first_use) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
{total}
"""
_OWN_TOTAL = "print('total', metrics._own().transitions.labels('x')._value.get())"
_MULTIPROCESS_TOTAL = """
from prometheus_client import CollectorRegistry, multiprocess
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print('total', registry.get_sample_value('approval_transitions_total', {'kind': 'x'}))
"""


def _race(prepare: str, total: str, **env: str) -> subprocess.CompletedProcess:
    script = _RACE.format(prepare=prepare, total=total)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
        env=worker_env({}, **env),
    )


def test_the_apps_first_counts_at_once_all_count(tmp_path):
    """The app's start-up (``METRICS_TOKEN``: ``api.ops.database_gauges`` calls
    ``metrics.serve``), then the repro: no thread dies of ``DuplicateTimeseries``."""
    proc = _race("metrics.serve()", _OWN_TOTAL, METRICS_TOKEN="t" * 32)
    assert proc.returncode == 0, proc.stderr
    assert "DuplicateTimeseries" not in proc.stderr
    assert "Exception" not in proc.stderr, proc.stderr
    assert "total 8.0" in proc.stdout, (proc.stdout, proc.stderr)


def test_a_resumer_processs_first_counts_at_once_all_count(tmp_path):
    """A resumer process collecting into ``PROMETHEUS_MULTIPROC_DIR`` (its start-up,
    ``api.resumers.count_for_app``), then eight resume threads counting at once."""
    prom = tmp_path / "prom"
    prom.mkdir()
    proc = _race(
        "from api.resumers import count_for_app; count_for_app(None)",
        _MULTIPROCESS_TOTAL,
        PROMETHEUS_MULTIPROC_DIR=str(prom),
    )
    assert proc.returncode == 0, proc.stderr
    assert "DuplicateTimeseries" not in proc.stderr
    assert "Exception" not in proc.stderr, proc.stderr
    assert "total 8.0" in proc.stdout, (proc.stdout, proc.stderr)


def test_first_use_without_start_up_is_safe_too(tmp_path):
    """A process that never called ``prepare`` (a script counting into the multiprocess
    directory): the first use registers once, under the lock."""
    prom = tmp_path / "prom"
    prom.mkdir()
    proc = _race("", _MULTIPROCESS_TOTAL, PROMETHEUS_MULTIPROC_DIR=str(prom))
    assert proc.returncode == 0, proc.stderr
    assert "Exception" not in proc.stderr, proc.stderr
    assert "total 8.0" in proc.stdout, (proc.stdout, proc.stderr)
