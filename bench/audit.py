"""Section 11: the audit export and verification at 10,000 decisions. Reported, not asserted.

On each backend, ``decisions`` decided runs are loaded in bulk (their rows, and four chained
events each: started, paused, the decision claimed, finished, through the store's bulk chain
writer), and one signed anchor is stored over them. Then, timed: a JSONL export of every
decision with the anchor key (in-process, and as ``approval-worker audit export`` from a fresh
process), ``verify-export`` of that file, and ``audit verify`` of the whole trail with its
anchors. The floor of the export is the one query it runs, fetched and nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import ROOT, Figure, Section, fresh_database
from testkit.databases import environment as environ

KEY = "bench-anchor-key-" + "x" * 32
TARGET = 10.0  # seconds for the export of 10,000 decisions
RUN = """
INSERT INTO runs (thread_id, workflow, status, created_at, updated_at, requested_by)
VALUES (:thread_id, 'refund', 'done', :at, :done_at, 'rita')
"""


def load(db, decisions: int, start: float) -> None:
    """``decisions`` finished runs, each decided 5 minutes after it was asked."""
    from store import audit

    runs, events = [], []
    for i in range(decisions):
        tid, at = f"aud_{i:05d}", start + i
        runs.append({"thread_id": tid, "at": at, "done_at": at + 301})
        claim = {
            "decision": {"decisions": [{"type": "approve"}]},
            "approvers": ["fay"],
            "source": "api",
        }
        for offset, actor, frm, to, reason, detail in (
            (0, "w1", None, "running", "started", None),
            (0.5, "w1", "running", "waiting", "paused for approval", {"interrupt_id": f"i{i}"}),
            (300, "api", "waiting", "resuming", "decision claimed", claim),
            (301, "w1", "resuming", "done", "finished", {"result": "refunded"}),
        ):
            events.append(
                {
                    "thread_id": tid,
                    "at": at + offset,
                    "actor": actor,
                    "from_status": frm,
                    "to_status": to,
                    "reason": reason,
                    "detail": None if detail is None else json.dumps(detail),
                }
            )
    with db.transaction() as tx:
        tx.many(RUN, runs)
        audit.append_many(tx, events)


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


def _timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def one_backend(backend: str, tmp: Path, pg_base: str, decisions: int) -> dict[str, float]:
    from core.proof import Signer, Trust
    from store import anchors, audit
    from store.audit_trail import AuditTrail
    from store.db import open_store
    from store.verify import Verified, verify
    from worker.export import jsonl, records, verify_export

    start = time.time() - 30 * 86400
    with fresh_database(backend, tmp, pg_base) as env, environ(env), open_store() as store:
        db = store.db
        took_load, _ = _timed(lambda: load(db, decisions, start))
        signer = Signer(Signer.generate())
        took_anchor, _ = _timed(lambda: anchors.write(db, signer, time.time()))
        took_again, _ = _timed(lambda: anchors.write(db, signer, time.time()))  # the next minute's
        trusted = Trust([signer.public_pem], KEY)
        end = start + decisions + 400  # every decision (each 300 s after its request)

        def export() -> bytes:
            rows = records(AuditTrail(db), start, end)
            return "".join(jsonl(rows, KEY, anchors.in_period(db, start, end))).encode()

        took_floor, _ = _timed(lambda: audit.decisions(db, start, end))
        took_export, data = _timed(export)
        if not isinstance(data, bytes) or data.count(b"\n") != decisions + 2:
            raise RuntimeError("the export holds another number of lines")
        took_check, problem = _timed(lambda: verify_export(data, KEY, trusted))
        if problem is not None:
            raise RuntimeError(f"the bench's export does not verify: {problem}")
        took_verify, result = _timed(lambda: verify(db, trusted))
        if not isinstance(result, Verified):
            raise RuntimeError(f"the bench's trail does not verify: {result}")
        command = [str(ROOT / ".venv" / "bin" / "approval-worker"), "audit", "export"]
        args = ["--from", _iso(start), "--to", _iso(end)]
        env_all = {**os.environ, "AUDIT_ANCHOR_KEY": KEY}  # the fresh database's, and the key
        took_cli, done = _timed(
            lambda: subprocess.run(
                [*command, *args], capture_output=True, env=env_all, timeout=300, check=False
            )
        )
    if not isinstance(done, subprocess.CompletedProcess) or done.returncode != 0:
        raise RuntimeError(f"approval-worker audit export failed: {getattr(done, 'stderr', '')}")
    if done.stdout.count(b"\n") != decisions + 2:
        raise RuntimeError("approval-worker audit export wrote another number of lines")
    return {
        "load": took_load,
        "anchor": took_anchor,
        "anchor_again": took_again,
        "floor": took_floor,
        "export": took_export,
        "cli": took_cli,
        "bytes": float(len(data)),
        "check": took_check,
        "verify": took_verify,
        "events": float(result.events),
    }


def measure(tmp: Path, pg_base: str, backends: list[str], decisions: int) -> Section:
    sec = Section("audit")
    for backend in backends:
        m = one_backend(backend, tmp, pg_base, decisions)
        sec.figures += [
            Figure(
                "audit",
                f"export of {decisions:,} decisions, JSONL, {backend}",
                m["export"],
                m["floor"],
                "s",
                m["export"] / m["floor"],
                f"< {TARGET:.0f} s",
                m["export"] < TARGET * decisions / 10000,
                "floor = its query alone",
            ),
            Figure(
                "audit",
                f"audit verify, {int(m['events']):,} events, {backend}",
                m["verify"],
                float("nan"),
                "s",
                float("nan"),
                "reported",
                None,
            ),
        ]
        sec.details += [
            f"{backend}: {decisions:,} decided runs, {int(m['events']):,} chained events "
            f"(bulk load {m['load']:.2f} s), one signed anchor over them:",
            "",
            f"- export in-process: {m['export']:.2f} s ({m['bytes'] / 1e6:.1f} MB; the query "
            f"alone {m['floor']:.2f} s)",
            f"- `approval-worker audit export --format jsonl` from a fresh process: "
            f"{m['cli']:.2f} s",
            f"- `verify-export` of the file: {m['check']:.2f} s",
            f"- `audit verify` (every chain and the anchor): {m['verify']:.2f} s",
            f"- an Ed25519 anchor over every run's head: {m['anchor'] * 1000:.1f} ms; the next "
            f"one, nothing changed since (the every-minute anchor of a quiet trail): "
            f"{m['anchor_again'] * 1000:.1f} ms",
            "",
        ]
    return sec
