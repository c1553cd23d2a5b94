"""The picture of one run's trace in docs/how-to/tracing.md, drawn from a real export:
``uv run python -m testkit.trace_picture docs/how-to/run-trace.svg``.

A refund run is started in a request that carries a ``traceparent``, pauses for its approval,
waits two hours (the clock the worker and the SDK read is moved on, not slept through), gets a
refused Slack press (a stale request), then the approval by e-mail link, and resumes to the
refund. The SDK's in-memory exporter holds the spans; they are drawn as a waterfall, each long
gap cut short and labelled with the time it really took.
"""

from __future__ import annotations

import sys
import tempfile
import time
from html import escape
from pathlib import Path

from testkit.otlp import Span, from_sdk, in_memory

GIVEN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
WAIT = 2 * 3600.0
GAP = 0.25  # seconds of drawing a gap longer than this is cut to


class Moving:
    """Real time plus the hours the picture skips, for the worker and the SDK alike."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def __call__(self) -> float:
        return time.time() + self.skipped


def export(folder: Path) -> list[Span]:
    import os

    import opentelemetry.sdk.trace as sdk_trace

    from core import tracing
    from core.hitl_decisions import Approve, Verdict
    from inbox.local import LocalInbox
    from store.db import open_store
    from worker.ballot import Decision, Source
    from worker.decisions import Applied
    from worker.runner import Runner

    os.environ["SQLITE_PATH"] = str(folder / "picture.db")
    os.environ.pop("DATABASE_URL", None)
    clock = Moving()
    sdk_trace.time_ns = lambda: int(clock() * 1_000_000_000)  # type: ignore[attr-defined]
    with in_memory() as exporter, open_store() as store:
        runner = Runner(store, LocalInbox(store.tables, clock), clock=clock)
        with tracing.span("POST /runs", parent=GIVEN, kind="server"):
            outcome = runner.start("Refund order A-1004: desk wobbles", thread_id="t-picture")
        run = runner.runs.get("t-picture")
        assert run is not None and outcome.interrupt_id is not None
        clock.skipped += WAIT
        approve: list[Verdict | None] = [Approve()]
        with tracing.span("POST /slack/interactions", kind="server"):
            runner.decide(
                Decision(
                    "t-picture", outcome.interrupt_id, approve, ["sam"], Source.SLACK, "0" * 32
                )
            )
        clock.skipped += 95.0
        with tracing.span("POST /email/decide", kind="server"):
            digest = run.request_digest
            applied = runner.decide(
                Decision(
                    "t-picture", outcome.interrupt_id, approve, ["alice"], Source.EMAIL, digest
                )
            )
            assert isinstance(applied, Applied), applied
            runner.resume_claimed(applied.run)
        return from_sdk(exporter.get_finished_spans())


def _positions(times: list[int]) -> dict[int, float]:
    """Each moment's place on the drawing, in seconds, with every gap longer than ``GAP`` cut
    to ``GAP``: the milliseconds of work and the hours of waiting on one picture."""
    out, at, last = {}, 0.0, None
    for t in sorted(set(times)):
        if last is not None:
            at += min((t - last) / 1e9, GAP)
        out[t] = at
        last = t
    return out


def _label(s: Span) -> str:
    a = s.attributes
    if s.name == "approval.decide":
        said = f"{a.get('approval.source')}: {a.get('approval.outcome')}"
        reason = a.get("approval.refusal.reason")
        return f"decide ({said}{', ' + str(reason) if reason else ''})"
    if s.name == "approval.pause":
        hours = (s.end_ns - s.start_ns) / 3.6e12
        return f"pause: {a.get('approval.status')} after {hours:.1f} h"
    return s.name


def svg(spans: list[Span]) -> str:
    ours = [s for s in spans if s.trace_id == GIVEN.split("-")[1]]
    ours.sort(key=lambda s: (s.start_ns, -s.end_ns))
    depth: dict[str, int] = {}
    for s in ours:
        depth[s.span_id] = depth.get(s.parent_id or "", -1) + 1
    pos = _positions([t for s in ours for t in (s.start_ns, s.end_ns)])
    total = max(pos.values()) or 1.0
    left, width, row = 330, 560, 26
    height = row * (len(ours) + 2)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 20}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    colours = {"approval.pause": "#f0b429", "approval.decide": "#7aa7d9"}
    for i, s in enumerate(ours):
        y = row * (i + 1)
        x0 = left + width * pos[s.start_ns] / total
        x1 = max(x0 + 2, left + width * pos[s.end_ns] / total)
        fill = colours.get(s.name, "#9bc59d" if s.name.startswith("execute_tool") else "#b9b9c9")
        if s.attributes.get("approval.outcome") == "refused":
            fill = "#e07a7a"
        indent = 8 + 12 * depth[s.span_id]
        out.append(f'<text x="{indent}" y="{y + 15}">{escape(_label(s))}</text>')
        out.append(
            f'<rect x="{x0:.1f}" y="{y + 4}" width="{x1 - x0:.1f}" height="{row - 8}" '
            f'fill="{fill}"/>'
        )
    out.append(
        f'<text x="{left}" y="{height - 8}" fill="#555">time runs left to right; every gap '
        f"longer than {GAP:g} s is cut short (the pause really lasted two hours)</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else "docs/how-to/run-trace.svg")
    with tempfile.TemporaryDirectory() as folder:
        spans = export(Path(folder))
    target.write_text(svg(spans))
    print(f"wrote {target}: {len(spans)} spans")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
