"""Exactly one claimer resumes a run, however many race for it."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from conftest import ROOT, run_cli

from agent.ledger import Ledger
from store.db import open_store
from store.runs import RunStore, new_owner
from store.states import Run
from worker.refusals import Refusal, Refused
from worker.runner import Runner

CLAIMERS = 16


def _answered_run(runner: Runner, thread_id: str) -> str:
    outcome = runner.start("Refund order A-1002: grinder is loud", thread_id=thread_id)
    assert outcome.status == "waiting"
    runner.inbox.answer(outcome.interrupt_id, [{"type": "approve"}], "alice")
    return outcome.interrupt_id


def _claims(store, thread_id: str) -> list[dict]:
    return [e for e in RunStore(store.db).events(thread_id) if e["reason"] == "decision claimed"]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_sixteen_threads_race_for_one_run_on_postgres(runner):
    interrupt_id = _answered_run(runner, "t-race")
    decision = runner.inbox.get(interrupt_id).resume_value()
    barrier = threading.Barrier(CLAIMERS)
    results: list[str] = []

    def claimer() -> None:
        with open_store() as own:  # a pool per claimer, as separate processes would have
            r = Runner(own)
            owner = new_owner("test")
            barrier.wait()
            if isinstance(r.claim("t-race", interrupt_id, decision, owner), Run):
                results.append(r.resume("t-race", owner).status)

    threads = [threading.Thread(target=claimer) for _ in range(CLAIMERS)]
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
        subprocess.Popen(
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
    interrupt_id = _answered_run(runner, "t-stale")
    decision = {"decisions": [{"type": "approve"}]}
    stale = runner.claim("t-stale", "not-the-pending-id", decision, "x")
    assert stale == Refused(Refusal.OTHER_INTERRUPT, "run is waiting on a different interrupt")
    assert runner.claim("t-nope", interrupt_id, decision, "x").reason == Refusal.UNKNOWN_RUN
    wrong_count = {"decisions": [{"type": "approve"}, {"type": "approve"}]}
    assert runner.claim("t-stale", interrupt_id, wrong_count, "x").reason == Refusal.INVALID
    assert runner.runs.get("t-stale").status == "waiting"
    claimed = runner.claim("t-stale", interrupt_id, decision, "me")
    assert isinstance(claimed, Run) and claimed.status == "resuming" and claimed.owner == "me"
    again = runner.claim("t-stale", interrupt_id, decision, "you")
    assert again == Refused(Refusal.NOT_WAITING, "run is resuming, not waiting")
