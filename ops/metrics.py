"""Prometheus metrics: counters and histograms kept by every process, gauges read from the
database when scraped.

With several processes (``uvicorn --workers N``, ``recover.py`` beside the app) each keeps its
own counters, so ``PROMETHEUS_MULTIPROC_DIR`` turns on prometheus-client's multiprocess mode:
every process writes its values to files there and a scrape of any worker sums them. Gauges
that describe the database (outbox backlog, runs by status, oldest waiting approval, decision
times and open requests by age, ``ops/decision_times.py``) are read from it instead, cached a
few seconds, so any worker reports the same numbers.

Counters are registered once per process, under a lock, before anything can count: when the
app starts serving ``/metrics`` (:func:`serve`) and when a process that collects into
``PROMETHEUS_MULTIPROC_DIR`` starts (:func:`prepare`). And counting never raises: a metric is
kept after a commit, and an error there must not stop the run's next step (issue 40).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from core import settings
from inbox.outbox import Delivery
from store.db import Store

log = logging.getLogger(__name__)

_serving = False  # set by the HTTP app when /metrics is on
_registered: SimpleNamespace | None = None  # this process's counters, once made
_register_lock = threading.Lock()
# set in a resumer process (api/resumers.py) whose app keeps the counters: (name, args) -> None
_forward: Callable[[str, tuple[Any, ...]], None] | None = None


def forward_to(send: Callable[[str, tuple[Any, ...]], None] | None) -> None:
    """This process counts for another one (a resumer for its app, without
    ``PROMETHEUS_MULTIPROC_DIR``): each observation goes to ``send`` instead, and the app
    replays it with :func:`replay`."""
    global _forward
    _forward = send


def replay(name: str, args: tuple[Any, ...]) -> None:
    """Count an observation a resumer process forwarded (one of :data:`FORWARDED`)."""
    if name in FORWARDED:
        globals()[name](*args)


def serve() -> None:
    """This process answers ``/metrics``: keep counters from now on, registered now, before
    any request can count."""
    global _serving
    _serving = True
    _own()


def prepare() -> None:
    """Register this process's counters now if it keeps any (a process collecting into
    ``PROMETHEUS_MULTIPROC_DIR``, a resumer for one): at start-up, before any request or
    resume counts, so no first use races another."""
    if _forward is None and enabled():
        _own()


def enabled() -> bool:
    """Counters are kept only where someone can read them: a process serving ``/metrics``, or
    any process when ``PROMETHEUS_MULTIPROC_DIR`` collects them all. Elsewhere (``run.py``) they
    cost nothing, not even the ~0.1 s import of prometheus-client."""
    return _serving or bool(settings.PROMETHEUS_MULTIPROC_DIR.get())


def _own() -> SimpleNamespace:
    """The process's counters and histograms, made and registered exactly once: each
    constructor registers in prometheus-client's global registry, so a second making (two
    threads' first use at once) would raise ``DuplicateTimeseries``."""
    global _registered
    made = _registered
    if made is not None:
        return made
    with _register_lock:
        if _registered is None:
            _registered = _make()
        return _registered


def _shared_directory() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR``, created when missing: a recipe's fresh ``/tmp`` volume holds
    no such directory, and prometheus-client then fails every observation and every scrape."""
    path = settings.PROMETHEUS_MULTIPROC_DIR.get()
    if path:
        os.makedirs(path, exist_ok=True)
    return path


def _make() -> SimpleNamespace:
    """In multiprocess mode the process's live files are removed when it exits
    (prometheus-client's ``mark_process_dead``)."""
    if _shared_directory():
        import atexit

        from prometheus_client import multiprocess

        atexit.register(multiprocess.mark_process_dead, os.getpid())
    from prometheus_client import Counter, Histogram

    return SimpleNamespace(
        transitions=Counter(
            "approval_transitions", "Run transitions committed, by event", ["kind"]
        ),
        claims=Counter(
            "approval_claims",
            "Decisions on a waiting run: won (claimed), pending (a quorum), lost, or refused",
            ["outcome", "reason"],
        ),
        deliveries=Counter(
            "approval_webhook_deliveries",
            "Outbox deliveries sent (out: webhooks, Slack, e-mail) and webhooks received (in)",
            ["direction", "outcome"],
        ),
        segment=Histogram(
            "approval_segment_seconds",
            "Wall time of one graph segment (start or resume to pause/end)",
        ),
        resumed=Histogram(
            "approval_decision_to_resumed_seconds",
            "From a decision being claimed to its run resuming",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
        ),
        sweep=Histogram("approval_sweep_seconds", "Wall time of one recovery sweep"),
    )


def _never_raises(count: Callable[..., None]) -> Callable[..., None]:
    """A count that fails is logged, never raised: it runs after a commit, and the run's
    next step (a segment, a hand-off, the answer) must not depend on it."""

    @functools.wraps(count)
    def safe(*args: Any) -> None:
        try:
            count(*args)
        except Exception as exc:  # noqa: BLE001 - a lost count, never a stranded run
            try:
                log.warning("metric %s not counted: %s", count.__name__, type(exc).__name__)
            except Exception:  # noqa: BLE001, S110 - logging itself broken: nothing left to tell
                pass

    return safe


@_never_raises
def transition(kind: str) -> None:
    if _forward is not None:
        _forward("transition", (kind,))
    elif enabled():
        _own().transitions.labels(kind).inc()


@_never_raises
def delivery(direction: str, outcome: str) -> None:
    if _forward is not None:
        _forward("delivery", (direction, outcome))
    elif enabled():
        _own().deliveries.labels(direction, outcome).inc()


def count_sent(sent: Delivery) -> None:
    delivery("out", "delivered" if sent.ok else "failed")


@_never_raises
def resumed(seconds: float) -> None:
    if _forward is not None:
        _forward("resumed", (seconds,))
    elif enabled():
        _own().resumed.observe(seconds)


@_never_raises
def count_claim(result: Any) -> None:
    """``result`` is the decision path's: applied (``won``), counted toward a quorum
    (``pending``), or refused; a race lost to another decision is the ``already decided`` one."""
    if not enabled():
        return
    reason = getattr(result, "reason", None)
    if hasattr(result, "run"):
        _own().claims.labels("won", "").inc()
    elif reason is None:
        _own().claims.labels("pending", "").inc()
    elif str(reason) == "already decided":
        _own().claims.labels("lost", str(reason)).inc()
    else:
        _own().claims.labels("refused", str(reason)).inc()


@contextmanager
def timed(name: str) -> Iterator[None]:
    """Observe the block's wall time in histogram ``name`` (``segment`` or ``sweep``)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        observe(name, time.perf_counter() - started)


@_never_raises
def observe(name: str, seconds: float) -> None:
    """One observation of histogram ``name`` (``segment`` or ``sweep``)."""
    if _forward is not None:
        _forward("observe", (name, seconds))
    elif enabled():
        getattr(_own(), name).observe(seconds)


# what a resumer process forwards to its app (count_claim: decisions are claimed in the app)
FORWARDED = frozenset({"transition", "delivery", "resumed", "observe"})


GAUGE_TTL = 5.0  # seconds a scrape reuses the database gauges

STATUSES = ("running", "waiting", "resuming", "done", "failed", "cancelled", "expired")


class DatabaseGauges:
    """A collector that reads the gauges from the database, at most once per ``GAUGE_TTL``."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time):
        self.store = store
        self.clock = clock
        self._lock = threading.Lock()
        self._at = 0.0
        self._cached: list[Any] = []

    def collect(self) -> Iterator[Any]:
        with self._lock:
            if time.monotonic() - self._at > GAUGE_TTL or not self._cached:
                self._cached = self._read()
                self._at = time.monotonic()
            yield from self._cached

    def _read(self) -> list[Any]:
        from prometheus_client.core import GaugeMetricFamily

        counts = self.store.tables.counts(max_attempts=settings.WEBHOOK_MAX_ATTEMPTS.get())
        outbox = GaugeMetricFamily(
            "approval_outbox_backlog",
            "Deliveries still owed: webhooks, notifications, Slack, e-mail",
        )
        outbox.add_metric([], float(counts.backlog))
        runs = GaugeMetricFamily("approval_runs", "Runs by status", labels=["status"])
        for status in STATUSES:
            runs.add_metric([status], float(counts.runs_by_status.get(status, 0)))
        oldest = counts.oldest_waiting_at
        age = GaugeMetricFamily(
            "approval_oldest_waiting_seconds", "Age of the oldest waiting approval (0: none)"
        )
        age.add_metric([], 0.0 if oldest is None else max(0.0, self.clock() - oldest))
        from ops import decision_times

        times = decision_times.families(decision_times.read(self.store, self.clock()))
        return [outbox, runs, age, *times]


def render(gauges: DatabaseGauges) -> bytes:
    """The text exposition: this process's (or, in multiprocess mode, all processes')
    counters and histograms, plus the database gauges."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    if _shared_directory():
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        for metric in vars(_own()).values():
            registry.register(metric)
    registry.register(gauges)
    return generate_latest(registry)
