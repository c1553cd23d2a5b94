"""Decision-time figures, from the database (``store.decision_times``), for ``/metrics`` and the
operators' page: per workflow, how long requests take from being asked to their first decision
(an approval or rejection claimed, or an expiry) and to done, over the runs requested in the last
``WINDOW`` (at most ``CAP``, the newest); and how many requests are open, by age, and overdue.

The histograms are Prometheus gauge histograms: they describe the window as it is now (a run
leaves it as it ages), so read them with ``histogram_quantile`` over their buckets, not
``rate``. Being read from the database, every process reports the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from store.db import Store

WINDOW = 7 * 86400.0  # seconds: runs requested this recently are counted
CAP = 20000  # at most this many runs (the newest) per read
BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 28800.0, 86400.0, 259200.0, 604800.0)
AGE_BANDS = (3600.0, 14400.0, 86400.0, 259200.0)  # open requests: <1h, 1-4h, 4h-1d, 1-3d, >3d
AGE_LABELS = ("0-1h", "1h-4h", "4h-1d", "1d-3d", "3d+")


def quantile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile of ``values`` (None when there are none)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Workflow:
    """One workflow's decision times (seconds) in the window, and its open requests."""

    name: str
    to_decision: list[float] = field(default_factory=list)
    to_done: list[float] = field(default_factory=list)
    requested: int = 0
    open_by_age: dict[str, int] = field(default_factory=lambda: dict.fromkeys(AGE_LABELS, 0))
    overdue: int = 0

    def stats(self, which: str) -> dict[str, float | None]:
        values = getattr(self, which)
        return {"p50": quantile(values, 0.5), "p95": quantile(values, 0.95)}

    @property
    def open(self) -> int:
        return sum(self.open_by_age.values())


def read(store: Store, now: float) -> dict[str, Workflow]:
    """Every workflow with a run requested in the window or a request open, by name."""
    flows: dict[str, Workflow] = {}
    times = store.tables.decision_times()
    for run in times.recent(since=now - WINDOW, cap=CAP):
        flow = flows.setdefault(run.workflow, Workflow(run.workflow))
        flow.requested += 1
        if run.decided_at is not None:
            flow.to_decision.append(max(0.0, run.decided_at - run.created_at))
        if run.done_at is not None:
            flow.to_done.append(max(0.0, run.done_at - run.created_at))
    for ages in times.open_by_age(now=now, bands=AGE_BANDS):
        flow = flows.setdefault(ages.workflow, Workflow(ages.workflow))
        flow.open_by_age.update(zip(AGE_LABELS, ages.bands, strict=True))
        flow.overdue = ages.overdue
    return dict(sorted(flows.items()))


def _buckets(values: list[float]) -> list[tuple[str, float]]:
    ordered = sorted(values)
    out, i = [], 0
    for edge in BUCKETS:
        while i < len(ordered) and ordered[i] <= edge:
            i += 1
        out.append((str(edge), float(i)))
    return [*out, ("+Inf", float(len(ordered)))]


def families(flows: dict[str, Workflow]) -> Iterator[Any]:
    """The Prometheus metric families of :func:`read`'s figures."""
    from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily

    for which, name, what in (
        ("to_decision", "approval_request_to_decision_seconds", "its first decision"),
        ("to_done", "approval_request_to_done_seconds", "the run being done"),
    ):
        family = GaugeHistogramMetricFamily(
            name,
            f"From a request to {what}, runs requested in the last 7 days, by workflow",
            labels=["workflow"],
        )
        for flow in flows.values():
            values = getattr(flow, which)
            family.add_metric([flow.name], _buckets(values), gsum_value=sum(values))
        yield family
    opened = GaugeMetricFamily(
        "approval_open_requests",
        "Requests waiting for a decision, by age",
        labels=["workflow", "age"],
    )
    overdue = GaugeMetricFamily(
        "approval_overdue_requests",
        "Requests past their deadline that the sweep has not expired yet",
        labels=["workflow"],
    )
    for flow in flows.values():
        for label, count in flow.open_by_age.items():
            opened.add_metric([flow.name, label], float(count))
        overdue.add_metric([flow.name], float(flow.overdue))
    yield opened
    yield overdue
