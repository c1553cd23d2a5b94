"""The audit export: every decision in a period, as JSONL or CSV, for an auditor to take away.

A JSONL export holds one record per decision, then the signed anchors of the period
(``store.anchors``: the worker's signed statements of its runs' chain heads, each checked
against the records it covers), then its own anchor: the record count, a SHA-256 over every line
before it and an HMAC of both with ``AUDIT_ANCHOR_KEY``. :func:`verify_export` needs only the
file and the key: a one-byte change fails it. CSV is for reading and carries no anchor.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from core import proof
from core.errors import UserError
from store.audit_trail import AuditTrail

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


def _outcome(reason: str, detail: dict[str, Any]) -> str:
    if reason == "expired":
        return "expired"
    decisions = ((detail.get("decision") or {}).get("decisions")) or []
    kinds = sorted({str(d.get("type")) for d in decisions if isinstance(d, dict)})
    return "+".join(kinds) or "decided"


def records(trail: AuditTrail, start: float, end: float) -> Iterator[dict[str, Any]]:
    """One record per decision in ``[start, end)``: the run, who asked, who decided, when,
    the outcome, and the event's place and hashes in its run's chain."""
    for decision in trail.decisions(start, end):
        e, detail = decision.event, decision.event.facts
        yield {
            "thread_id": e.thread_id,
            "workflow": decision.workflow,
            "requested_by": decision.requested_by,
            "requested_at": decision.requested_at,
            "decided_at": e.at,
            "outcome": _outcome(e.reason, detail),
            "approvers": detail.get("approvers") or [],
            "source": detail.get("source") or "",
            "actor": e.actor,
            "position": e.seq,
            "prev_hash": decision.prev_hash,
            "hash": decision.hash,
        }


def _mac(key: str, digest: str) -> str:
    return hmac.new(key.encode(), digest.encode(), hashlib.sha256).hexdigest()


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False) + "\n"


def jsonl(
    rows: Iterable[dict[str, Any]], key: str | None, anchors: Iterable[dict[str, Any]] = ()
) -> Iterator[str]:
    """The lines of a JSONL export: the records, the period's signed anchors (one
    ``{"audit_anchor": ...}`` line each), and last the file's anchor (signed when a key is set)."""
    running, count, anchored = hashlib.sha256(), 0, 0
    for record in rows:
        line = _line(record)
        running.update(line.encode())
        count += 1
        yield line
    for stored in anchors:
        line = _line({"audit_anchor": stored})
        running.update(line.encode())
        anchored += 1
        yield line
    digest = running.hexdigest()
    anchor: dict[str, Any] = {
        "records": count,
        "anchors": anchored,
        "sha256": digest,
        "at": time.time(),
    }
    if key:
        anchor["hmac_sha256"] = _mac(key, f"{count}:{anchored}:{digest}")
    yield _line({"anchor": anchor})


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


def verify_export(data: bytes, key: str, trust: proof.Trust | None = None) -> str | None:
    """Why a JSONL export does not verify with ``key`` (None: it does): the file's anchor over
    every line, then the signed anchors in it (their chain, and signatures with ``trust``,
    by default the old HMAC key alone), then each record at a position an anchor signed
    against that anchor's hash."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        return "the file is empty"
    try:
        anchor = json.loads(lines[-1])["anchor"]
        count, anchored = int(anchor["records"]), int(anchor["anchors"])
    except (ValueError, KeyError, TypeError):
        return "the last line is not an anchor"
    running = hashlib.sha256()
    for line in lines[:-1]:
        running.update(line + b"\n")
    digest = running.hexdigest()
    if len(lines) - 1 != count + anchored or digest != anchor.get("sha256"):
        return "the records do not match the anchor (changed, added or removed)"
    mac = anchor.get("hmac_sha256")
    if not isinstance(mac, str):
        return "the anchor is not signed"
    if not hmac.compare_digest(mac, _mac(key, f"{count}:{anchored}:{digest}")):
        return "the anchor's signature does not match (another key, or the anchor changed)"
    try:
        records = [json.loads(line) for line in lines[:count]]
        stored = [json.loads(line)["audit_anchor"] for line in lines[count:-1]]
    except (ValueError, KeyError, TypeError):
        return "a line is not a record or an anchor"
    problem = proof.check_chain(stored, trust or proof.Trust([], key))
    if problem is not None:
        return f"signed anchor {problem.anchor}: {problem.text}"
    heads = {(t, p): (h, a["seq"]) for a in stored for t, p, h in a["heads"]}
    for record in records:
        found = heads.get((record.get("thread_id"), record.get("position")))
        if found is not None and found[0] != record.get("hash"):
            return (
                f"run {record['thread_id']}, position {record['position']}: the record's hash "
                f"is not the one anchor {found[1]} signed"
            )
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
