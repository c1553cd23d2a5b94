"""The evidence pack (issue 35): a month of mixed decisions (approved, edited, rejected,
expired) and a halt, anchored and witnessed, written by ``approval-worker audit evidence`` and
verified by the pack's own ``verify.py`` in a fresh venv holding only ``cryptography``; a
tampered pack fails it, naming what changed."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from store.verify import Verified, verify
from testkit import zygote
from testkit.clock import runner_at
from testkit.databases import ROOT
from testkit.decide import claim
from testkit.venvs import crypto_only_venv
from worker.audit import anchor_now
from worker.decisions import Applied
from worker.halting import halt, unhalt

DAY = 86400.0
PLAN = [  # each order is refunded once, after the runs that did not refund it
    ("reject", "A-1001"),
    ("expire", "A-1002"),
    ("approve", "A-1001"),
    ("edit", "A-1002"),
    ("reject", "A-1004"),
    ("approve", "A-1004"),
    ("reject", "A-1005"),
    ("approve", "A-1005"),
]
COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")


def edited(run) -> list[dict]:
    args = {
        **run.request.to_json()["action_requests"][0]["args"],
        "reason": "reviewer: damaged, not lost",
    }
    return [{"type": "edit", "edited_action": {"name": "issue_refund", "args": args}}]


@pytest.fixture
def month(store, clock, anchor_keys, tmp_path, monkeypatch):
    """Eight runs over thirty days, decided four ways, a halt and its lift, anchored every few
    days (and at the end), each anchor also in the witness."""
    witness = tmp_path / "anchors.witness"
    monkeypatch.setenv("AUDIT_WITNESS_FILE", str(witness))
    monkeypatch.setenv("AUDIT_PUBLIC_KEYS", str(anchor_keys.pub_path))
    runner = runner_at(store, clock)
    for i, (how, order) in enumerate(PLAN):
        tid = f"t-ev{i}"
        outcome = runner.start(
            f"Refund order {order}: arrived broken", thread_id=tid, requested_by="rita"
        )
        assert outcome.status == "waiting", outcome
        clock.now += DAY
        if how == "expire":
            clock.now += 30 * DAY
            runner.sweep()
            clock.now -= 29 * DAY
            continue
        if i == 3:
            halt(store, "cli:olga", "quarter close", tool="issue_refund", now=clock())
            clock.now += 3600
            unhalt(store, "cli:olga", "closed", tool="issue_refund", now=clock())
        decisions = {
            "approve": [{"type": "approve"}],
            "edit": edited(runner.runs.get(tid)),
            "reject": [{"type": "reject", "message": "not eligible"}],
        }[how]
        applied = claim(runner, tid, outcome.interrupt_id, {"decisions": decisions}, by="alice")
        assert isinstance(applied, Applied), applied
        assert runner.resume_claimed(applied.run).status == "done"
        clock.now += 2 * DAY
        anchor_now(store.tables.audit(), anchor_keys.signer, clock(), None)
    clock.now += DAY
    anchor_now(store.tables.audit(), anchor_keys.signer, clock(), None)
    assert isinstance(verify(store.db, anchor_keys.trust()), Verified)
    return tmp_path


def test_a_months_pack_verifies_offline_and_a_tampered_one_fails(month, anchor_keys):
    pack = month / "pack"
    args = ["audit", "evidence", "--from", "2027-01-01", "--to", "2027-04-01", str(pack)]
    written = zygote.run([COMMAND, *args], capture_output=True, text=True, timeout=120, check=False)
    assert written.returncode == 0, written.stderr
    assert "8 decisions, 2 halts" in written.stdout, written.stdout
    records = [json.loads(line) for line in (pack / "decisions.jsonl").read_text().splitlines()]
    assert sorted(r["outcome"] for r in records) == sorted(
        ["approve"] * 3 + ["edit", "expired"] + ["reject"] * 3
    )
    edit = next(r for r in records if r["outcome"] == "edit")
    assert edit["overrides"][0]["type"] == "edit" and edit["approvers"] == ["alice"]
    assert edit["separation_of_duties"] == {
        "required": edit["rules"]["separation"],
        "requester": "rita",
        "approvers": ["alice"],
        "holds": True,
    }
    assert edit["executed"][0]["tool"] == "issue_refund" and edit["ended"]["status"] == "done"
    assert edit["requested_at"] <= edit["paused_at"] < edit["decided_at"] <= edit["ended"]["at"]
    halts = [json.loads(line) for line in (pack / "halts.jsonl").read_text().splitlines()]
    assert [(h["what"], h["by"], h["reason"]) for h in halts] == [
        ("halted", "cli:olga", "quarter close"),
        ("unhalted", "cli:olga", "closed"),
    ]
    assert (pack / f"keys/{anchor_keys.signer.kid}.pub").exists()
    assert (pack / "witness.jsonl").read_text().strip()

    python = crypto_only_venv(month / "venv")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}

    def check() -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(python), str(pack / "verify.py")],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=month,
            env=clean,
        )

    done = check()
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.startswith("evidence pack verifies: 8 decisions")

    # an approver changed in the records, the manifest's hash put right: the events disagree
    text = (pack / "decisions.jsonl").read_text()
    (pack / "decisions.jsonl").write_text(text.replace('"alice"', '"mallory"', 1))
    manifest = json.loads((pack / "manifest.json").read_text())
    import hashlib

    manifest["files"]["decisions.jsonl"] = hashlib.sha256(
        (pack / "decisions.jsonl").read_bytes()
    ).hexdigest()
    (pack / "manifest.json").write_text(json.dumps(manifest))
    failed = check()
    assert failed.returncode == 1
    assert "decisions.jsonl: is not what the signed events say (edited)" in failed.stdout
    (pack / "decisions.jsonl").write_text(text)

    # the events rewritten to match: their chain, then the signed anchors, disagree
    events = (pack / "events.jsonl").read_text()
    (pack / "events.jsonl").write_text(events.replace('\\"alice\\"', '\\"mallory\\"', 1))
    failed = check()
    assert failed.returncode == 1
    assert "events.jsonl: does not match the manifest" in failed.stdout
    assert "content does not match its hash (edited)" in failed.stdout
