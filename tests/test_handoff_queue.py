"""The one hand-off (issue 32): a committed claim is the resume queue's entry in the database,
and resumers take it from there (``store.claimed``, ``worker.resumer``). A process killed right
after its claim commits loses nothing and leaves no lease to wait for; two resumers never take
one run twice; ``NOTIFY`` in the claim's transaction wakes a listening resumer at once."""

from __future__ import annotations

import threading

import pytest
from conftest import run_cli

from store.claimed import count_queued, queued, take_next
from store.db import open_store
from store.receipts import Receipts
from store.runs import new_owner
from store.states import Event, Status
from testkit.decide import claim
from testkit.wait import until
from worker import resumer as resumer_module
from worker.decisions import Applied
from worker.resumer import Resumer
from worker.runner import Runner

REQUEST = "Refund order A-1004: desk wobbles"


def _waiting(runner: Runner, thread_id: str) -> str:
    outcome = runner.start(REQUEST, thread_id=thread_id)
    assert outcome.status == "waiting", outcome
    assert outcome.interrupt_id
    return outcome.interrupt_id


def _reasons(runner: Runner, thread_id: str) -> list[str]:
    return [e.reason for e in runner.runs.events(thread_id)]


@pytest.mark.parametrize("point", ["decide.claimed", "transition.committed"])
def test_a_process_killed_right_after_its_claim_commits_is_resumed_by_another_at_once(
    runner, monkeypatch, point
):
    """The inbox command line is SIGKILLed at ``point``, right after its claim committed. The
    run is queued, not leased, so a resumer of another process takes it at once, although
    ``LEASE_SECONDS`` is an hour: nothing waits for a lease, and the refund happens once."""
    monkeypatch.setenv("LEASE_SECONDS", "3600")
    interrupt_id = _waiting(runner, "t-killed")
    monkeypatch.setenv("FAULTS", f"{point}=kill")
    run_cli("inbox", "approve", interrupt_id, "--by", "alice", check_rc=-9)
    monkeypatch.delenv("FAULTS")
    row = runner.runs.get("t-killed")
    assert row is not None and row.status == Status.RESUMING and queued(row), row

    resumer = Resumer(runner, 2).start()
    try:
        until(lambda: runner.runs.get("t-killed").status == Status.DONE, "the run resumed")
    finally:
        resumer.close(30)
    reasons = _reasons(runner, "t-killed")
    assert reasons.count(Event.TAKEN_UP) == 1 and Event.RECLAIMED not in reasons, reasons
    assert len(Receipts(runner.store.db).for_thread("t-killed")) == 1


def test_the_command_line_never_resumes_a_sweep_takes_its_queued_claim(runner):
    """No app and no ``recover --forever``: ``inbox approve`` commits the claim, says it is
    queued and exits without running the graph; the next ``recover`` sweep takes it."""
    interrupt_id = _waiting(runner, "t-alone")
    out = run_cli("inbox", "approve", interrupt_id, "--by", "alice").stdout
    assert "queued for a resumer" in out, out
    run = runner.runs.get("t-alone")
    assert run.status == Status.RESUMING and queued(run)
    assert Event.TAKEN_UP not in _reasons(runner, "t-alone")
    swept = run_cli("recover.py").stdout
    assert "Refunded" in swept, swept
    assert runner.runs.get("t-alone").status == Status.DONE


def test_a_queued_claim_is_taken_by_a_running_resumer_not_the_command_line(runner, monkeypatch):
    """With a resumer running (as in an app or ``recover --forever``), the command line's
    decision is taken by it; the command line only reports that it is queued."""
    monkeypatch.setenv("RESUME_POLL_SECONDS", "0.2")
    interrupt_id = _waiting(runner, "t-served")
    resumer = Resumer(runner, 2).start()
    try:
        out = run_cli("inbox", "approve", interrupt_id, "--by", "alice").stdout
        assert "queued for a resumer" in out, out
        until(lambda: runner.runs.get("t-served").status == Status.DONE, "the run resumed")
    finally:
        resumer.close(30)
    taken = [e.actor for e in runner.runs.events("t-served") if e.reason == Event.TAKEN_UP]
    assert len(taken) == 1 and taken[0].startswith("resumer@"), taken


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_two_resumers_never_take_one_run_twice(runner, backend):
    """Twelve queued claims; eight threads over two connection pools take at once (``FOR
    UPDATE SKIP LOCKED``): every run is taken exactly once, none is left."""
    applied = []
    for i in range(12):
        tid = f"t-race-{i}"
        interrupt_id = _waiting(runner, tid)
        result = claim(runner, tid, interrupt_id, {"decisions": [{"type": "approve"}]})
        assert isinstance(result, Applied)
        applied.append(tid)
    assert count_queued(runner.runs) == 12
    taken: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)
    with open_store() as other_store:
        other = Runner(other_store)

        def take(r: Runner) -> None:
            start.wait()
            while True:
                run = take_next(r.runs, new_owner("race"), r.clock() + 60)
                if run is None:
                    return
                with lock:
                    taken.append(run.thread_id)

        threads = [
            threading.Thread(target=take, args=(runner if i % 2 else other,)) for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert sorted(taken) == sorted(applied)  # each once, none left
    assert count_queued(runner.runs) == 0
    for tid in applied:
        assert _reasons(runner, tid).count(Event.TAKEN_UP) == 1


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_two_resumers_resume_every_queued_run_once(runner, backend):
    """Two resumers with their own pools race for twelve decided runs: each is resumed once,
    with one refund."""
    tids = []
    for i in range(12):
        tid = f"t-two-{i}"
        interrupt_id = _waiting(runner, tid)
        assert isinstance(
            claim(runner, tid, interrupt_id, {"decisions": [{"type": "approve"}]}), Applied
        )
        tids.append(tid)
    with open_store() as other_store:
        first, second = Resumer(runner, 3).start(), Resumer(Runner(other_store), 3).start()
        try:
            for tid in tids:
                until(lambda t=tid: runner.runs.get(t).status == Status.DONE, f"{tid} done")
        finally:
            first.close(30)
            second.close(30)
    receipts = Receipts(runner.store.db)
    for tid in tids:
        assert _reasons(runner, tid).count(Event.TAKEN_UP) == 1
        assert len(receipts.for_thread(tid)) == 1


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_notify_in_the_claims_transaction_wakes_a_listening_resumer(runner, monkeypatch, backend):
    """The resumer polls once a minute here; it listens before the claim, so the claim's
    ``NOTIFY`` (not the poll) is what has it take the run."""
    monkeypatch.setenv("RESUME_POLL_SECONDS", "60")
    interrupt_id = _waiting(runner, "t-woken")
    listening = "SELECT count(*) AS n FROM pg_stat_activity WHERE query = 'LISTEN approval_resume'"
    with open_store() as other_store:
        resumer = Resumer(Runner(other_store), 1).start()
        try:
            # polls until the resumer's listen connection is up (deadline in until)
            until(lambda: runner.store.db.row(listening)["n"] >= 1, "the resumer listening")
            result = claim(runner, "t-woken", interrupt_id, {"decisions": [{"type": "approve"}]})
            assert isinstance(result, Applied)
            until(lambda: runner.runs.get("t-woken").status == Status.DONE, "woken and resumed", 30)
        finally:
            resumer.close(30)


def test_a_closed_resumer_is_out_of_the_store_before_the_store_closes(runner):
    """The app closes its store right after its resumer: a take still running then, on a
    closed SQLite connection, crashed the process (exit 139 in about one cold start's close in
    four, found by the bench). ``close`` returns only once the taking thread has ended."""
    for _ in range(5):
        resumer = Resumer(runner, 1).start()
        resumer.ring()  # a take in flight as the close begins
        assert resumer.close(1) == []
        assert not resumer._taker.is_alive()


def test_a_run_taken_as_the_resumer_closes_is_resumed_or_handed_back(runner, monkeypatch):
    """A close that begins while the taking thread is inside a take: the run that take commits
    is resumed before the close returns, or returned by it to be handed back. It was taken and
    then dropped (the pool had shut down under the taker: "cannot schedule new futures after
    shutdown", seen in a resumer process stopped under load), left to wait out its lease."""
    interrupt_id = _waiting(runner, "t-closing")
    applied = claim(runner, "t-closing", interrupt_id, {"decisions": [{"type": "approve"}]})
    assert isinstance(applied, Applied) and queued(applied.run)
    inside, go = threading.Event(), threading.Event()

    def held_take(*args, **kwargs):
        inside.set()
        assert go.wait(30), "the test never let the take go on"
        return take_next(*args, **kwargs)

    monkeypatch.setattr(resumer_module, "take_next", held_take)
    resumer = Resumer(runner, 1).start()
    assert inside.wait(30), "the resumer never began its take"
    closed: list[list[str]] = []
    closer = threading.Thread(target=lambda: closed.append(resumer.close(30)))
    closer.start()
    until(resumer._stop.is_set, "the close began")
    go.set()
    closer.join()
    run = runner.runs.get("t-closing")
    assert run.status == Status.DONE or closed == [["t-closing"]], (run, closed)
