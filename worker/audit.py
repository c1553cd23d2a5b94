"""``python -m worker.audit verify`` checks the whole audit trail and names the first broken
link by run and position; ``python -m worker.audit export --from --to --format jsonl|csv``
writes every decision in a period. A JSONL export ends with a signed anchor (an HMAC with
``AUDIT_ANCHOR_KEY`` over every line before it), so an auditor verifies the file alone with
``python -m worker.audit verify-export FILE``: a one-byte change fails it.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import hmac
import io
import json
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from core import settings
from core.cli import cli_main
from core.errors import UserError
from store import audit
from store.db import Database

COLUMNS = (
    "thread_id",
    "workflow",
    "requested_by",
    "requested_at",
    "decided_at",
    "outcome",
    "approvers",
    "source",
    "actor",
    "position",
    "prev_hash",
    "hash",
)


def _outcome(row: dict[str, Any], detail: dict[str, Any]) -> str:
    if row["reason"] == "expired":
        return "expired"
    decisions = ((detail.get("decision") or {}).get("decisions")) or []
    kinds = sorted({str(d.get("type")) for d in decisions if isinstance(d, dict)})
    return "+".join(kinds) or "decided"


def records(db: Database, start: float, end: float) -> Iterator[dict[str, Any]]:
    """One record per decision in ``[start, end)``: the run, who asked, who decided, when,
    the outcome, and the event's place and hashes in its run's chain."""
    for row in audit.decisions(db, start, end):
        detail = json.loads(row["detail"]) if row["detail"] else {}
        yield {
            "thread_id": row["thread_id"],
            "workflow": row["workflow"],
            "requested_by": row["requested_by"],
            "requested_at": row["created_at"],
            "decided_at": row["at"],
            "outcome": _outcome(row, detail),
            "approvers": detail.get("approvers") or [],
            "source": detail.get("source") or "",
            "actor": row["actor"],
            "position": row["seq"],
            "prev_hash": row["prev_hash"],
            "hash": row["hash"],
        }


def _mac(key: str, digest: str) -> str:
    return hmac.new(key.encode(), digest.encode(), hashlib.sha256).hexdigest()


def jsonl(rows: Iterable[dict[str, Any]], key: str | None) -> Iterator[str]:
    """The lines of a JSONL export; the last one is the anchor (signed when a key is set)."""
    running, count = hashlib.sha256(), 0
    for record in rows:
        line = json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n"
        running.update(line.encode())
        count += 1
        yield line
    digest = running.hexdigest()
    anchor: dict[str, Any] = {"records": count, "sha256": digest, "at": time.time()}
    if key:
        anchor["hmac_sha256"] = _mac(key, f"{count}:{digest}")
    yield json.dumps({"anchor": anchor}, separators=(",", ":"), sort_keys=True) + "\n"


def csv_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
    writer.writeheader()
    for record in rows:
        writer.writerow({**record, "approvers": "; ".join(record["approvers"])})
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    if buffer.getvalue():
        yield buffer.getvalue()


def verify_export(data: bytes, key: str) -> str | None:
    """Why a JSONL export does not verify with ``key`` (None: it does)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        return "the file is empty"
    try:
        anchor = json.loads(lines[-1])["anchor"]
    except (ValueError, KeyError, TypeError):
        return "the last line is not an anchor"
    running = hashlib.sha256()
    for line in lines[:-1]:
        running.update(line + b"\n")
    digest = running.hexdigest()
    if len(lines) - 1 != anchor.get("records") or digest != anchor.get("sha256"):
        return "the records do not match the anchor (changed, added or removed)"
    mac = anchor.get("hmac_sha256")
    if not isinstance(mac, str):
        return "the anchor is not signed"
    if not hmac.compare_digest(mac, _mac(key, f"{anchor['records']}:{digest}")):
        return "the anchor's signature does not match (another key, or the anchor changed)"
    return None


def parse_moment(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(
            f"{text!r} is not a date or time (2026-01-31 or 2026-01-31T12:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@cli_main
def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m worker.audit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("verify", help="check every run's chain; exit 1 at the first broken link")
    export = sub.add_parser("export", help="every decision in a period, to standard output")
    export.add_argument("--from", dest="start", required=True, help="e.g. 2026-01-01 (UTC)")
    export.add_argument("--to", dest="end", required=True, help="exclusive, e.g. 2026-02-01")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    check = sub.add_parser("verify-export", help="check a JSONL export with AUDIT_ANCHOR_KEY")
    check.add_argument("file")
    args = parser.parse_args()

    if args.command == "verify-export":
        key = settings.AUDIT_ANCHOR_KEY.get()
        if not key:
            raise UserError("set AUDIT_ANCHOR_KEY to the key the export was signed with")
        with open(args.file, "rb") as f:
            problem = verify_export(f.read(), key)
        if problem:
            print(f"export does not verify: {problem}")
            sys.exit(1)
        print("export verifies")
        return

    from store.db import open_store

    with open_store() as store:
        if args.command == "verify":
            result = audit.verify(store.db)
            if isinstance(result, audit.Break):
                print(f"audit trail broken: {result}")
                sys.exit(1)
            print(
                f"audit trail verifies: {result.events} events in {result.runs} runs "
                f"({result.unchained} from before the chain; {result.pruned_runs} runs, "
                f"{result.pruned_events} events pruned by retention)"
            )
            return
        start, end = parse_moment(args.start), parse_moment(args.end)
        rows = records(store.db, start, end)
        lines = (
            jsonl(rows, settings.AUDIT_ANCHOR_KEY.get())
            if args.format == "jsonl"
            else csv_lines(rows)
        )
        for line in lines:
            sys.stdout.write(line)


if __name__ == "__main__":
    main()
