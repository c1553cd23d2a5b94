"""Exactly one claimer resumes a run, however many race for it."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from conftest import ROOT, run_cli

from agent.ledger import Ledger
from store.db import open_store
from store.event_rows import AuditEvent
from store.runs import RunStore
from testkit import zygote
from testkit.decide import answer, claim
from worker.decisions import Applied
from worker.refusals import Refusal, Refused
from worker.runner import Runner

CLAIMERS = 16


def _waiting_run(runner: Runner, thread_id: str) -> str:
    outcome = runner.start("Refund order A-1002: grinder is loud", thread_id=thread_id)
    assert outcome.status == "waiting"
    return outcome.interrupt_id


def _answered_run(runner: Runner, thread_id: str) -> str:
    interrupt_id = _waiting_run(runner, thread_id)
    answer(runner, interrupt_id, [{"type": "approve"}], "alice")
    return interrupt_id


def _claims(store, thread_id: str) -> list[AuditEvent]:
    return [e for e in RunStore(store.db).events(thread_id) if e.reason == "decision claimed"]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_sixteen_threads_race_for_one_run_on_postgres(runner):
    interrupt_id = _waiting_run(runner, "t-race")
    decision = {"decisions": [{"type": "approve"}]}
    barrier = threading.Barrier(CLAIMERS)
    results: list[str] = []

    def claimer(n: int) -> None:
        with open_store() as own:  # a pool per claimer, as separate processes would have
            r = Runner(own)
            barrier.wait()
            claimed = claim(r, "t-race", interrupt_id, decision, f"reviewer{n}")
            if isinstance(claimed, Applied):
                results.append(r.resume_claimed(claimed.run).status)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(CLAIMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == ["done"]
    assert len(_claims(runner.store, "t-race")) == 1
    assert len(Ledger(runner.store.db).refunds()) == 1
    assert run_cli("recover.py").stdout == ""
    assert len(Ledger(runner.store.db).refunds()) == 1


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sixteen_recover_processes_race_on_sqlite(runner):
    _answered_run(runner, "t-race")
    procs = [
        zygote.popen(
            [sys.executable, str(ROOT / "recover.py")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(CLAIMERS)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    printed = [out for out, _ in outputs if out.strip()]
    assert len(printed) == 1 and "Refunded 329.00 EUR" in printed[0], outputs
    assert len(_claims(runner.store, "t-race")) == 1
    assert len(Ledger(runner.store.db).refunds()) == 1
    assert run_cli("recover.py").stdout == ""


def test_a_stale_or_foreign_claim_changes_nothing(runner):
    interrupt_id = _waiting_run(runner, "t-stale")
    decision = {"decisions": [{"type": "approve"}]}
    stale = claim(runner, "t-stale", "not-the-pending-id", decision)
    said = "the run now waits on another request: read it again"
    assert stale == Refused(Refusal.OTHER_INTERRUPT, said)
    assert claim(runner, "t-nope", interrupt_id, decision).reason == Refusal.UNKNOWN_RUN
    wrong_count = {"decisions": [{"type": "approve"}, {"type": "approve"}]}
    assert claim(runner, "t-stale", interrupt_id, wrong_count).reason == Refusal.INVALID
    assert runner.runs.get("t-stale").status == "waiting"
    claimed = claim(runner, "t-stale", interrupt_id, decision, "me")
    assert isinstance(claimed, Applied) and claimed.run.status == "resuming"
    again = claim(runner, "t-stale", interrupt_id, decision, "you")
    assert again.reason == Refusal.DECIDED
    assert "already decided by me through the API on " in again.message
    assert again.details["request"] == interrupt_id and again.details["decided_at"].endswith("Z")
