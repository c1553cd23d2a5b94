"""``approval-worker audit evidence --from --to DIR``: an auditor's pack of a period, verifiable
offline with nothing but Python and ``cryptography``.

The pack holds the period's decisions (derived from the hash-chained events by
``core.evidence_check.derive``: who asked, the actions, the rules fixed at the pause (quorum,
separation of duties, authority bands), each approval, the decision, overrides, what was then
executed and when), the halts, every event of those runs up to what anchors cover, the Ed25519
anchors, the trusted public keys, the witness's lines for the period, and ``verify.py`` with the
two modules it needs, copied verbatim from ``core/``. Which regulation each field answers, and
what the pack does not prove: docs/audit-evidence.md.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from core import evidence_check, proof, settings
from core.errors import UserError
from store.audit_trail import AuditTrail

VERIFY = '''"""Offline check of this evidence pack: `python3 verify.py` (Python 3.11+ and the
`cryptography` package, nothing else). Exit 0 when it verifies, 1 naming every problem."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from core.evidence_check import main  # noqa: E402

sys.exit(main(HERE))
'''
README = """Evidence pack: decisions from {start} to {end} (UTC), written {now}.

Verify it offline:
    python3 -m venv venv && venv/bin/pip install cryptography && venv/bin/python verify.py

decisions.jsonl  one line per decision: requester, actions, rules at the pause (quorum,
                 separation of duties, authority band), approvals, decision, overrides,
                 what was executed and when, its event's place and hash
halts.jsonl      every halt and unhalt in the period: who, when, what, why
events.jsonl     every event of those runs (and the halts' chain), hash-chained
anchors.jsonl    the Ed25519-signed anchors over those chains
keys/            the public keys the anchors are checked with (compare their ids with the
                 ones your organisation published: the pack cannot vouch for its own keys)
witness.jsonl    the witness's copies of the period's anchors
manifest.json    the period, counts, key ids and every file's SHA-256
"""


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def _events(trail: AuditTrail, runs: list[str], covered: dict[str, int]) -> list[dict[str, Any]]:
    """Each run's chain up to what anchors cover, as the pack stores it (JSON round-tripped, so
    the writer derives from exactly what the verifier reads)."""
    rows = []
    for thread_id in runs:
        for row in trail.chain(thread_id):
            if row["seq"] is None or row["seq"] <= covered.get(thread_id, 0):
                rows.append({**row, "at": float(row["at"])})
    return json.loads(json.dumps(rows))


def _witness(start: float, seqs: set[int]) -> list[dict[str, Any]]:
    path = settings.AUDIT_WITNESS_FILE.get()
    if not path or not Path(path).exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [a for a in proof.read_witness(f) if a["seq"] in seqs]


def write_pack(trail: AuditTrail, start: float, end: float, out: Path, trust: proof.Trust) -> str:
    """Write the pack for ``[start, end)`` into ``out``; the summary line."""
    if not trust.keys:
        raise UserError("set AUDIT_PUBLIC_KEYS (the pack carries the keys its anchors verify with)")
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} is not empty: give a new folder")
    signed = [a for a in trail.anchors() if a["alg"] == proof.ED25519]
    covered: dict[str, int] = {}
    for anchor in signed:
        for thread_id, position, _ in anchor["heads"]:
            covered[thread_id] = max(covered.get(thread_id, 0), position)
    runs = [*trail.decision_runs(start, end), evidence_check.HALTS_CHAIN]
    events = _events(trail, runs, covered)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_run.setdefault(e["thread_id"], []).append(e)
    decisions = [
        d
        for t in sorted(by_run)
        if t != evidence_check.HALTS_CHAIN
        for d in evidence_check.derive(by_run[t], start, end)
    ]
    unanchored = len(trail.decisions(start, end)) - len(decisions)
    halts = evidence_check.derive_halts(by_run.get(evidence_check.HALTS_CHAIN, []), start, end)
    in_period = {a["seq"] for a in trail.anchors_in_period(start, end)}
    witness = _witness(start, in_period & {a["seq"] for a in signed})
    (out / "keys").mkdir(parents=True, exist_ok=True)
    (out / "core").mkdir()
    files = {
        "decisions.jsonl": evidence_check.jsonl(decisions),
        "halts.jsonl": evidence_check.jsonl(halts),
        "events.jsonl": evidence_check.jsonl(events),
        "anchors.jsonl": "".join(proof.witness_line(a) for a in signed),
        "witness.jsonl": "".join(proof.witness_line(a) for a in witness),
        "verify.py": VERIFY,
        "README.txt": README.format(start=_stamp(start), end=_stamp(end), now=_stamp(time.time())),
        "core/__init__.py": '"""The verifier: core/proof.py and core/evidence_check.py."""\n',
    }
    for pem in trust.public_pems:
        files[f"keys/{proof.key_id(pem)}.pub"] = pem.decode()
    for name in ("proof.py", "evidence_check.py"):
        files[f"core/{name}"] = (Path(proof.__file__).parent / name).read_text(encoding="utf-8")
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    manifest = {
        "period": [start, end],
        "generated_at": time.time(),
        "key_ids": sorted(trust.keys),
        "counts": {
            "decisions": len(decisions),
            "halts": len(halts),
            "events": len(events),
            "anchors": len(signed),
            "witnessed": len(witness),
            "decisions_not_yet_anchored": unanchored,
        },
        "files": {n: hashlib.sha256((out / n).read_bytes()).hexdigest() for n in sorted(files)},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    note = f"; {unanchored} not yet anchored, left out" if unanchored else ""
    return (
        f"evidence pack in {out}: {len(decisions)} decisions, {len(halts)} halts, "
        f"{len(events)} events, {len(signed)} anchors{note}; check it with "
        f"`python3 {out / 'verify.py'}`"
    )
