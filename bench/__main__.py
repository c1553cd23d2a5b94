"""``uv run python -m bench``: run the benchmarks, print the table, write ``bench/RESULTS.md``.

Sizes are flags so a quick look (or the smoke test) can shrink them; the defaults finish in a
few minutes on two cores. ``--only resume,cold`` runs a subset and prints its table (``--out
FILE`` keeps it; only a full run writes ``bench/RESULTS.md``). ``lgserver`` (this product's
``/lg`` against ``langgraph dev``) runs only when named, with its dependency group:
``uv run --group lgserver python -m bench --only lgserver``.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import (
    DEFAULT_PG,
    ROOT,
    BenchError,
    Figure,
    Section,
    check_local,
    load_average,
    machine,
)

# A deployment runs compiled bytecode (the Dockerfile and the SAM build run compileall), so the
# bench's children do too, on machines that set PYTHONDONTWRITEBYTECODE=1 as well: otherwise each
# cold start, the product's and the floors' alike, measures compiling from source.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

SECTIONS = (
    "resume",
    "start",
    "webhook",
    "sweep",
    "cold",
    "scale",
    "lambda",
    "retention",
    "decision",
    "loop",
    "audit",
    "tracing",
    "channels",
    "rolling",
    "lgserver",
)
# run only when named: it needs the ``lgserver`` dependency group (langgraph-cli)
OPTIONAL = ("lgserver",)
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in OPTIONAL)
# group commit as docs/how-to says to start from (half of pg_test_fsync's one-write flush here)
COMMIT_DELAY_US, COMMIT_SIBLINGS = 50, 2
NOTES = Path(__file__).with_name("NOTES.md")
DEFAULT_OUT = Path(__file__).with_name("RESULTS.md")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument(
        "--only", default=",".join(DEFAULT_SECTIONS), help=f"subset of {','.join(SECTIONS)}"
    )
    p.add_argument("--backends", default="postgres,sqlite", help="resume, start, lgserver")
    p.add_argument("--runs", type=int, default=40, help="runs per batch (resume, start)")
    p.add_argument("--rounds", type=int, default=5, help="alternating raw/full rounds")
    p.add_argument("--rate-ignored", type=float, default=100.0, help="webhook (a), per second")
    p.add_argument("--rate-resume", type=float, default=10.0, help="webhook (b), per second")
    p.add_argument("--duration", type=float, default=8.0, help="seconds per webhook (a) phase")
    p.add_argument(
        "--duration-resume", type=float, default=15.0, help="seconds per webhook (b) phase"
    )
    p.add_argument("--latency-reps", type=int, default=3, help="webhook repetitions")
    p.add_argument("--sweep-sizes", default="1000,10000,100000", help="waiting runs per sweep")
    p.add_argument("--sweep-answered", type=int, default=100, help="answered runs per sweep")
    p.add_argument("--cold-reps", type=int, default=7, help="cold-start repetitions")
    p.add_argument("--lambda-reps", type=int, default=5, help="Lambda cold-start repetitions")
    p.add_argument("--scale-runs", type=int, default=1000, help="answered runs (scale-out)")
    p.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    p.add_argument("--sweepers", type=int, default=2, help="recover.py --wait processes")
    p.add_argument("--sweep-interval", type=float, default=0.5, help="sweepers' --interval")
    p.add_argument(
        "--commit-delay",
        type=int,
        default=COMMIT_DELAY_US,
        help="scale-out's third race: Postgres commit_delay in us (0: no third race)",
    )
    p.add_argument("--commit-siblings", type=int, default=COMMIT_SIBLINGS)
    p.add_argument("--retention-runs", type=int, default=1000, help="finished runs (retention)")
    p.add_argument("--retention-cycles", type=int, default=3, help="prune cycles (retention)")
    p.add_argument("--decision-rate", type=float, default=10.0, help="decisions per second")
    p.add_argument("--decision-count", type=int, default=100, help="decisions (decision)")
    p.add_argument("--decision-raw", type=int, default=30, help="raw resumes for its floor")
    p.add_argument("--audit-decisions", type=int, default=10000, help="decisions (audit)")
    p.add_argument("--tracing-count", type=int, default=60, help="decisions per mode (tracing)")
    p.add_argument("--tracing-rounds", type=int, default=2, help="off/on rounds (tracing)")
    p.add_argument("--channels-count", type=int, default=60, help="pauses (channels a)")
    p.add_argument("--channels-rate", type=float, default=4.0, help="pauses per second")
    p.add_argument("--channels-swept", type=int, default=10000, help="runs swept (channels b)")
    p.add_argument("--channels-presses", type=int, default=60, help="Slack presses at most")
    p.add_argument("--loop-reps", type=int, default=3, help="windows of slow resumes (loop)")
    p.add_argument("--rolling-rate", type=float, default=4.0, help="decisions per second")
    p.add_argument("--rolling-seconds", type=float, default=60.0, help="seconds per phase")
    p.add_argument("--rolling-surge", action="store_true", help="new app up before the old stops")
    p.add_argument("--lg-runs", type=int, default=200, help="waiting runs per server (lgserver)")
    p.add_argument("--lg-concurrency", default="1,8", help="client concurrencies (lgserver)")
    p.add_argument("--lg-servers", default="product,langgraph", help="servers (lgserver)")
    p.add_argument("--profile", choices=("missed", "always", "never"), default="missed")
    p.add_argument(
        "--out",
        default=None,
        help="where the report goes (default: bench/RESULTS.md after a full run; a subset "
        "prints its table only, so it never overwrites the full run's report)",
    )
    args = p.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(args.only) - set(SECTIONS)
    if unknown:
        p.error(f"unknown section(s) {', '.join(sorted(unknown))}; choose from {SECTIONS}")
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    args.lg_concurrency = [int(c) for c in args.lg_concurrency.split(",")]
    args.lg_servers = [s.strip() for s in args.lg_servers.split(",") if s.strip()]
    args.sweep_sizes = sorted(int(s) for s in args.sweep_sizes.split(","))
    if any(s < args.sweep_answered for s in args.sweep_sizes):
        p.error("--sweep-sizes must each be at least --sweep-answered")
    return args


def fmt(value: float, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "s":
        return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"
    if unit == "B":
        return f"{value:,.0f} B"
    if unit in ("ms", "runs/s", "MiB"):
        return f"{value:.1f} {unit}"
    return f"{value:.0f} {unit}"


def verdict(figure: Figure) -> str:
    return "n/a" if figure.met is None else ("met" if figure.met else "MISSED")


def table(figures: list[Figure]) -> list[str]:
    head = ["#", "figure", "worker", "floor", "ratio", "target", "", "notes"]
    rows = [
        [
            str(SECTIONS.index(f.section) + 1),
            f.name,
            fmt(f.measured, f.unit),
            fmt(f.floor, f.unit),
            "-" if math.isnan(f.ratio) else f"{f.ratio:.2f}",
            f.target,
            verdict(f),
            f.note,
        ]
        for f in figures
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def plain_table(figures: list[Figure]) -> str:
    rows = [["#", "figure", "worker", "floor", "ratio", "target", ""]]
    for f in figures:
        ratio = "-" if math.isnan(f.ratio) else f"{f.ratio:.2f}"
        rows.append(
            [
                str(SECTIONS.index(f.section) + 1),
                f.name,
                fmt(f.measured, f.unit),
                fmt(f.floor, f.unit),
                ratio,
                f.target,
                verdict(f),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def run(args: argparse.Namespace, pg_base: str, tmp: Path) -> list[Section]:
    sections: list[Section] = []
    want = args.only
    profile_all = args.profile == "always"
    profile_missed = args.profile == "missed"

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    resume_pg = None
    if "resume" in want or "start" in want:
        from bench import throughput

        data = {}
        for backend in args.backends:
            log(f"resume/start throughput on {backend}: {args.rounds} x {args.runs} runs")
            data[backend] = throughput.measure(backend, tmp, pg_base, args.runs, args.rounds)
        resume, start = throughput.sections(data, args.runs, args.rounds)
        chosen = [sec for sec in (resume, start) if sec.name in want]
        missed = any(f.met is False for sec in chosen for f in sec.figures)
        if chosen and (profile_all or (profile_missed and missed)):
            backend = "postgres" if "postgres" in args.backends else args.backends[0]
            log(f"profiling the full path on {backend}")
            chosen[0].profile = throughput.profile_full(backend, tmp, pg_base, args.runs)
            chosen[0].profile_of = f"{args.runs} full starts, then their resumes, on {backend}"
        sections += chosen
        resume_pg = next((f.measured for f in resume.figures if f.name.endswith("postgres")), None)
    if "webhook" in want:
        from bench import latency

        log("webhook acknowledgement latency")
        sections.append(
            latency.measure(
                tmp,
                pg_base,
                rate_ignored=args.rate_ignored,
                rate_resume=args.rate_resume,
                duration=args.duration,
                duration_resume=args.duration_resume,
                reps=args.latency_reps,
                profile=args.profile,
            )
        )
    if "sweep" in want:
        from bench import sweep

        log(f"recovery sweep at {args.sweep_sizes} waiting")
        sec = sweep.measure(
            tmp, pg_base, args.sweep_sizes, args.sweep_answered, args.profile != "never"
        )
        if not (profile_all or (profile_missed and any(f.met is False for f in sec.figures))):
            sec.profile = None
        else:
            sec.profile_of = f"one sweep of {max(args.sweep_sizes):,} waiting"
        sections.append(sec)
    if "cold" in want:
        from bench import cold

        log(f"cold start, {args.cold_reps} reps")
        sec = cold.measure(tmp, args.cold_reps)
        if profile_all or (profile_missed and any(f.met is False for f in sec.figures)):
            sec.profile = cold.import_profile(tmp)
            sec.profile_of = "python -X importtime"
        sections.append(sec)
    if "scale" in want:
        from bench import scaleout

        log(f"scale-out: {args.workers} workers, {args.sweepers} sweepers, {args.scale_runs} runs")
        sections.append(
            scaleout.measure(
                tmp,
                pg_base,
                runs=args.scale_runs,
                workers=args.workers,
                sweepers=args.sweepers,
                interval=args.sweep_interval,
                reference=resume_pg,
                group_commit=(args.commit_delay, args.commit_siblings),
            )
        )
    if "lambda" in want:
        from bench import serverless

        log(f"Lambda handler cold start, {args.lambda_reps} reps")
        sections.append(serverless.measure(tmp, args.lambda_reps))
    if "retention" in want:
        from bench import retention

        log(f"retention: {args.retention_runs} finished runs, {args.retention_cycles} cycles")
        sections.append(retention.measure(tmp, pg_base, args.retention_runs, args.retention_cycles))
    if "decision" in want:
        from bench import decision

        log(f"decision to done: {args.decision_count} at {args.decision_rate:g}/s; waiting cost")
        sections.append(
            decision.measure(
                tmp,
                pg_base,
                rate=args.decision_rate,
                count=args.decision_count,
                raw_runs=args.decision_raw,
            )
        )
    if "loop" in want:
        from bench import loop

        log(f"/healthz while page decisions resume: {args.loop_reps} windows")
        sections.append(loop.measure(tmp, pg_base, args.loop_reps))
    if "audit" in want:
        from bench import audit

        log(f"audit export and verify: {args.audit_decisions:,} decisions on {args.backends}")
        sections.append(audit.measure(tmp, pg_base, args.backends, args.audit_decisions))
    if "tracing" in want:
        from bench import tracing

        log(f"tracing off vs on: {args.tracing_count} decisions each, {args.tracing_rounds} rounds")
        sections.append(
            tracing.measure(
                tmp,
                pg_base,
                rate=args.decision_rate,
                count=args.tracing_count,
                rounds=args.tracing_rounds,
                raw_runs=args.decision_raw,
            )
        )
    if "channels" in want:
        from bench import channels

        log(
            f"channels: {args.channels_count} pauses with mail at 2 s/message; Slack presses "
            f"during a sweep of {args.channels_swept:,} on SQLite"
        )
        sections.append(
            channels.measure(
                tmp,
                pg_base,
                count=args.channels_count,
                rate=args.channels_rate,
                swept=args.channels_swept,
                presses=args.channels_presses,
            )
        )
    if "rolling" in want:
        from bench import rolling

        log(f"rolling restart: {args.rolling_rate:g}/s for {args.rolling_seconds:g} s per phase")
        sections.append(
            rolling.measure(
                tmp,
                pg_base,
                rate=args.rolling_rate,
                duration=args.rolling_seconds,
                surge=args.rolling_surge,
            )
        )
    if "lgserver" in want:
        from bench import lgserver

        log(f"/lg against langgraph dev: {args.lg_runs} runs at {args.lg_concurrency}")
        sections.append(
            lgserver.measure(
                tmp,
                pg_base,
                args.backends,
                runs=args.lg_runs,
                concurrency=args.lg_concurrency,
                servers=args.lg_servers,
                log=log,
            )
        )
    return sections


def results_md(
    sections: list[Section], info: dict[str, str], command: str, started: str, took: float, load
) -> str:
    figures = [f for s in sections for f in s.figures]
    out = ["# Benchmark results", ""]
    out += [f"Generated by `{command}` on {started} (took {took / 60:.1f} min).", ""]
    out += ["## Machine", ""]
    out += [f"- {k}: {v}" for k, v in info.items()]
    out += [f"- load average (1/5/15 min) before / after: {load[0]} / {load[1]}", ""]
    out += ["## Results", ""]
    out += [
        "Every ratio is worker / floor, measured in this run. For throughput higher is better "
        "(target: at least the ratio); for latency, time and memory lower is better (target: at "
        "most the ratio).",
        "",
    ]
    out += table(figures)
    out += [""]
    out += ["## Details", ""]
    for s in sections:
        out += [f"### {SECTIONS.index(s.name) + 1}. {s.name}", ""]
        out += s.details
        out += [""]
    profiles = [s for s in sections if s.profile]
    if profiles:
        out += ["## Profiles (for the missed targets)", ""]
        for s in profiles:
            out += [f"### {s.name}: {s.profile_of}", "", "```"]
            out += _trim(s.profile).splitlines()
            out += ["```", ""]
    if NOTES.exists():
        out += [NOTES.read_text().rstrip(), ""]
    return "\n".join(out) + "\n"


def _trim(text: str, limit: int = 90) -> str:
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    return "\n".join(lines[:limit] + (["..."] if len(lines) > limit else []))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    try:
        pg_base = check_local(os.environ.get("DATABASE_URL") or DEFAULT_PG)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_before = load_average()
    t0 = time.monotonic()
    info = machine(pg_base)
    if "unreachable" in info["postgres"]:
        print(f"error: Postgres at {pg_base} is {info['postgres']}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        try:
            sections = run(args, pg_base, Path(tmp))
        except (RuntimeError, BenchError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    took = time.monotonic() - t0
    figures = [f for s in sections for f in s.figures]
    print(plain_table(figures))
    argv_text = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    command = "uv run python -m bench" + (f" {argv_text}" if argv_text else "")
    if os.environ.get("DATABASE_URL"):
        from store.db import redact_url

        command = f"DATABASE_URL={redact_url(os.environ['DATABASE_URL'])} {command}"
    text = results_md(sections, info, command, started, took, (load_before, load_average()))
    full = args.only == list(DEFAULT_SECTIONS)
    out = Path(args.out) if args.out else DEFAULT_OUT if full else None
    if out is None:
        print(f"\n({took / 60:.1f} min; --out FILE keeps this report)")
        return 0
    out.write_text(text)
    print(f"\nwrote {out} ({took / 60:.1f} min)")
    if full and out == DEFAULT_OUT:  # a full run only
        _write_generated(sections, started, info["git"].split()[0])
    return 0


def _write_generated(sections: list[Section], started: str, commit: str) -> None:
    from bench import report

    figures = [f for s in sections for f in s.figures]
    if report.update_readme(ROOT / "README.md", report.readme_block(figures, started, commit)):
        print("updated the results table in README.md")
    capacity = report.capacity_md(sections, started)
    if capacity is not None:
        DEFAULT_OUT.with_name("CAPACITY.md").write_text(capacity)
        print("wrote bench/CAPACITY.md")


if __name__ == "__main__":
    sys.exit(main())
