"""An evidence pack's records, derived from the hash-chained events, and the pack's offline
check. Like :mod:`core.proof` it imports only the standard library, ``cryptography`` and
``core.proof``: ``approval-worker audit evidence`` writes the decisions with :func:`derive`, and
ships this file and ``core/proof.py`` verbatim in the pack, where ``python verify.py`` derives
them again from the events and compares. So a record cannot say more than the signed events do.
"""

from __future__ import annotations

import hashlib
import json
import sys
import unicodedata
from pathlib import Path
from typing import Any

from core.proof import Problem, Trust, check_chain, check_heads, check_run, read_witness

CLAIMED, EXPIRED = "decision claimed", "expired"
HALTS_CHAIN = "audit:halts"
FILES = ("decisions.jsonl", "halts.jsonl", "events.jsonl", "anchors.jsonl", "witness.jsonl")


def _detail(event: dict[str, Any]) -> dict[str, Any]:
    value = json.loads(event["detail"]) if event.get("detail") else {}
    return value if isinstance(value, dict) else {}


def _same(a: str, b: str) -> bool:
    return (
        unicodedata.normalize("NFKC", a).casefold() == unicodedata.normalize("NFKC", b).casefold()
    )


def _decision(events: list[dict[str, Any]], index: int) -> dict[str, Any]:
    """The record of the decision at ``events[index]`` (a claim or an expiry)."""
    event, detail = events[index], _detail(events[index])
    started = next((e for e in events if e["reason"] == "started"), None)
    begun = _detail(started) if started else {}
    paused = next(
        (e for e in reversed(events[:index]) if e["reason"] == "paused for approval"), None
    )
    rules = _detail(paused) if paused else {}
    interrupt_id = detail.get("interrupt_id") or rules.get("interrupt_id")
    approvals = [
        {
            "by": e["actor"],
            "at": e["at"],
            "source": _detail(e).get("source"),
            "decisions": _detail(e).get("decisions"),
        }
        for e in events[:index]
        if e["reason"] == "approval recorded" and _detail(e).get("interrupt_id") == interrupt_id
    ]
    decisions = (detail.get("decision") or {}).get("decisions") or []
    kinds = sorted({str(d.get("type")) for d in decisions if isinstance(d, dict)})
    after: list[dict[str, Any]] = []
    for e in events[index + 1 :]:
        if e["reason"] == "paused for approval":
            break
        after.append(e)
    approvers = [str(a) for a in detail.get("approvers") or []]
    requester = begun.get("requested_by")
    return {
        "thread_id": event["thread_id"],
        "workflow": begun.get("workflow"),
        "requested_by": requester,
        "requested_at": started["at"] if started else None,
        "paused_at": paused["at"] if paused else None,
        "actions": [
            {"name": a.get("name"), "args": a.get("args")}
            for a in rules.get("action_requests") or []
        ],
        "rules": {k: rules.get(k) for k in ("quorum", "separation", "authority", "expires_at")},
        "approvals": approvals,
        "decided_at": event["at"],
        "decided_by": event["actor"],
        "outcome": "expired" if event["reason"] == EXPIRED else "+".join(kinds) or "decided",
        "approvers": approvers,
        "source": detail.get("source"),
        "overrides": [
            d for d in decisions if isinstance(d, dict) and d.get("type") in ("edit", "reject")
        ],
        "separation_of_duties": {
            "required": bool(rules.get("separation")),
            "requester": requester,
            "approvers": approvers,
            "holds": not any(_same(a, str(requester or "")) for a in approvers),
        },
        "executed": [
            {"tool": _detail(e).get("tool"), "at": e["at"], "result": _detail(e).get("result")}
            for e in after
            if e["reason"] == "side effect"
        ],
        "ended": next(
            (
                {"status": e["to_status"], "at": e["at"]}
                for e in after
                if e["to_status"] in ("done", "failed", "cancelled", "expired")
            ),
            None,
        ),
        "event": {"position": event["seq"], "hash": event["hash"]},
    }


def derive(events: list[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    """One run's decisions in ``[start, end)`` from its events (in the order written)."""
    return [
        _decision(events, i)
        for i, e in enumerate(events)
        if e["reason"] in (CLAIMED, EXPIRED) and start <= e["at"] < end
    ]


def derive_halts(events: list[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    """Every halt and unhalt in ``[start, end)``: who, when, what and why."""
    return [
        {
            "what": e["reason"],
            "by": e["actor"],
            "at": e["at"],
            **_detail(e),
            "event": {"position": e["seq"], "hash": e["hash"]},
        }
        for e in events
        if e["thread_id"] == HALTS_CHAIN and start <= e["at"] < end
    ]


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows)


def _lines(folder: Path, name: str) -> list[dict[str, Any]]:
    return read_witness((folder / name).read_text(encoding="utf-8").splitlines())


def check_pack(folder: Path) -> tuple[list[str], dict[str, Any]]:
    """Every problem with the pack in ``folder`` (none: it verifies), and its manifest."""
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    problems = []
    for name, digest in manifest["files"].items():
        if hashlib.sha256((folder / name).read_bytes()).hexdigest() != digest:
            problems.append(f"{name}: does not match the manifest's SHA-256 (changed)")
    pems = [p.read_bytes() for p in sorted((folder / "keys").glob("*.pub"))]
    trust = Trust(pems)
    anchors = _lines(folder, "anchors.jsonl")
    found: list[Problem] = []
    bad = check_chain(anchors, trust)
    if bad is not None:
        found.append(bad)
    by_seq = {a["seq"]: a for a in anchors}
    for copy in _lines(folder, "witness.jsonl"):
        if json.dumps(by_seq.get(copy["seq"]), sort_keys=True) != json.dumps(copy, sort_keys=True):
            found.append(Problem(copy["seq"], "differs from the witness's copy, or is missing"))
    events = _lines(folder, "events.jsonl")
    runs: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        runs.setdefault(e["thread_id"], []).append(e)
    for thread_id, rows in runs.items():
        broken, _ = check_run(thread_id, rows)
        if broken is not None:
            found.append(broken)
    mine = [{**a, "heads": [h for h in a["heads"] if h[0] in runs]} for a in anchors]
    hashes = {(e["thread_id"], e["seq"]): e["hash"] for e in events}
    found += check_heads(mine, hashes, {})
    covered: dict[str, int] = {}
    for a in anchors:
        for thread_id, position, _ in a["heads"]:
            covered[thread_id] = max(covered.get(thread_id, 0), position)
    for e in events:
        if e["seq"] is not None and e["seq"] > covered.get(e["thread_id"], 0):
            found.append(Problem(0, "no anchor in the pack covers it", e["thread_id"], e["seq"]))
    start, end = manifest["period"]
    expected = [d for t in sorted(runs) if t != HALTS_CHAIN for d in derive(runs[t], start, end)]
    if jsonl(expected) != (folder / "decisions.jsonl").read_text(encoding="utf-8"):
        problems.append("decisions.jsonl: is not what the signed events say (edited)")
    halts = derive_halts(runs.get(HALTS_CHAIN, []), start, end)
    if jsonl(halts) != (folder / "halts.jsonl").read_text(encoding="utf-8"):
        problems.append("halts.jsonl: is not what the signed events say (edited)")
    return problems + [str(p) for p in found], manifest


def main(default: Path) -> int:
    """``python verify.py [PACK]``: 0 when the pack verifies, 1 naming every problem."""
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    problems, manifest = check_pack(folder)
    if problems:
        print("evidence pack does NOT verify:")
        for line in problems:
            print(f"  {line}")
        return 1
    keys = ", ".join(manifest.get("key_ids", [])) or "none"
    print(
        f"evidence pack verifies: {manifest['counts']['decisions']} decisions, "
        f"{manifest['counts']['events']} events, {manifest['counts']['anchors']} anchors "
        f"signed by key(s) {keys} (check these ids against the ones your organisation published)"
    )
    return 0
