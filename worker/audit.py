"""``approval-worker audit verify`` checks the whole audit trail and its signed anchors and
names the first broken link by run and position; ``approval-worker audit export --from --to
--format jsonl|csv`` writes every decision in a period (``worker.export``), and
``approval-worker audit verify-export FILE`` checks a JSONL export with ``AUDIT_ANCHOR_KEY``
alone; ``approval-worker audit anchor`` signs and stores an anchor now (the sweep writes one
every ``AUDIT_ANCHOR_EVERY``). ``python -m worker.audit ...`` is the same.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from datetime import UTC, datetime

from core import settings
from core.cli import cli_main
from core.errors import UserError, one_line
from store import anchors, audit
from store.db import Database
from worker.export import csv_lines, jsonl, parse_moment, records, verify_export

log = logging.getLogger(__name__)

DESCRIPTION = """Check, export and anchor the audit trail. `verify`: every run's hash chain and the
signed anchors (their signatures with AUDIT_ANCHOR_KEY); exit 1 naming the first broken link by
run and position. `export --from DATE --to DATE [--format jsonl|csv]`: every decision in the
period, to standard output; JSONL carries the period's signed anchors and ends with its own,
signed with AUDIT_ANCHOR_KEY. `verify-export FILE`: check such a file with the key alone (exit 1
when it does not verify). `anchor`: sign and store an anchor now (the sweep stores one every
AUDIT_ANCHOR_EVERY)."""


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def verify_report(db: Database) -> tuple[bool, str]:
    """The trail checked (anchors' MACs with ``AUDIT_ANCHOR_KEY`` when it is set): whether it
    verifies, and the one line that says so or names the first broken link."""
    key = settings.AUDIT_ANCHOR_KEY.get()
    result = audit.verify(db, key)
    if isinstance(result, audit.Break):
        return False, f"audit trail broken: {result}"
    line = (
        f"audit trail verifies: {result.events} events in {result.runs} runs "
        f"({result.unchained} from before the chain; {result.pruned_runs} runs, "
        f"{result.pruned_events} events pruned by retention)"
    )
    if result.anchors and result.newest_anchor_at is not None:
        plural = "s" if result.anchors != 1 else ""
        how = "" if result.anchors_signed else ", signatures NOT checked: AUDIT_ANCHOR_KEY is unset"
        line += (
            f"; {result.anchors} signed anchor{plural}{how}, the newest at "
            f"{_stamp(result.newest_anchor_at)}"
        )
    else:
        line += "; no signed anchors yet"
    return True, line


def anchor_due(db: Database, now: float) -> dict | None:
    """The sweep's step: sign and store an anchor when the newest is ``AUDIT_ANCHOR_EVERY``
    old (nothing without ``AUDIT_ANCHOR_KEY``). A failure waits for the next sweep."""
    key = settings.AUDIT_ANCHOR_KEY.get()
    if not key:
        return None
    try:
        return anchors.write(db, key, now, settings.AUDIT_ANCHOR_EVERY.get())
    except Exception as exc:  # noqa: BLE001 - the sweep's outcomes stand; the next one retries
        log.warning("audit anchor skipped: %s", one_line(exc))
        return None


def _need_key() -> str:
    key = settings.AUDIT_ANCHOR_KEY.get()
    if not key:
        raise UserError("set AUDIT_ANCHOR_KEY (the key anchors and exports are signed with)")
    return key


@cli_main
def main() -> None:
    prog = sys.argv[0] if sys.argv[0].startswith("approval-worker") else "python -m worker.audit"
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "verify", help="check every run's chain and the anchors; exit 1 at the first broken link"
    )
    export = sub.add_parser("export", help="every decision in a period, to standard output")
    export.add_argument("--from", dest="start", required=True, help="e.g. 2026-01-01 (UTC)")
    export.add_argument("--to", dest="end", required=True, help="exclusive, e.g. 2026-02-01")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    check = sub.add_parser("verify-export", help="check a JSONL export with AUDIT_ANCHOR_KEY")
    check.add_argument("file")
    sub.add_parser("anchor", help="sign and store an anchor over the chains' heads now")
    args = parser.parse_args()

    if args.command == "verify-export":
        key = _need_key()
        with open(args.file, "rb") as f:
            problem = verify_export(f.read(), key)
        if problem:
            print(f"export does not verify: {problem}")
            sys.exit(1)
        print("export verifies")
        return
    if args.command == "export":  # checked before the database is opened
        start, end = parse_moment(args.start), parse_moment(args.end)
    signing = _need_key() if args.command == "anchor" else ""

    from store.db import open_store

    with open_store() as store:
        if args.command == "verify":
            ok, line = verify_report(store.db)
            print(line)
            if not ok:
                sys.exit(1)
            return
        if args.command == "anchor":
            anchor = anchors.write(store.db, signing, time.time())
            assert anchor is not None  # no period given: always written
            print(f"anchor {anchor['seq']} signed over {len(anchor['heads'])} run heads")
            return
        rows = records(store.db, start, end)
        if args.format == "csv":
            lines = csv_lines(rows)
        else:
            period = anchors.in_period(store.db, start, end)
            lines = jsonl(rows, settings.AUDIT_ANCHOR_KEY.get(), period)
        for line in lines:
            sys.stdout.write(line)


if __name__ == "__main__":
    main()
