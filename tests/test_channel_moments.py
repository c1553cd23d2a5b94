"""When things happened, as the channels say it (issue 37): a notification's timestamp is its
event's time, not the pause's; nothing is escalated once the deadline has passed (a late sweep
expires instead); and a request past its deadline stops being listed as waiting at once, in the
web inbox's queue and the LangGraph thread search and thread read, before any sweep writes it
down. In process, an injected clock, both backends, a local receiver on 127.0.0.1."""

from __future__ import annotations

import pytest

from api.langgraph_views import thread_view
from api.lg_common import Thread
from inbox.outbox import FLUSHER
from ops.notify import iso
from store.queue import QueueFilter, queue_count, queue_page, threads_count, threads_page
from testkit.clock import HOUR, runner_at, waiting
from testkit.receiver import Receiver


@pytest.fixture
def receiver(monkeypatch):
    r = Receiver().start()
    monkeypatch.setenv("NOTIFY_URLS", r.url)
    yield r
    r.stop()


def events(receiver: Receiver, thread_id: str) -> dict[str, str]:
    """Each notification kind about ``thread_id`` and its timestamp."""
    return {
        r.json["type"]: r.json["timestamp"]
        for r in receiver.got
        if r.json["data"]["thread_id"] == thread_id
    }


def test_reminder_and_escalation_carry_the_time_they_happened(store, clock, receiver):
    runner = runner_at(store, clock)
    paused_at = clock.now
    waiting(runner, "t-when", expires_in="10h")
    clock.now += 5 * HOUR
    reminded_at = clock.now
    runner.sweeper.climb_ladder()
    clock.now += 3 * HOUR
    escalated_at = clock.now
    runner.sweeper.climb_ladder()
    runner.sweeper.flush_outbox()
    got = events(receiver, "t-when")
    assert got["approval.requested"] == iso(paused_at)
    assert got["approval.reminder"] == iso(reminded_at)  # not the pause time it used to carry
    assert got["approval.escalated"] == iso(escalated_at)


def test_a_late_sweep_expires_and_never_escalates(store, clock, receiver):
    runner = runner_at(store, clock)
    outcome = waiting(runner, "t-late", expires_in="10h")
    run = runner.runs.get("t-late")
    # a sweep that listed the run before the deadline and reaches it after: the step is refused
    clock.now += 11 * HOUR
    detail = {"expires_at": run.expires_at, "point": 0.8}
    assert runner.runs.ladder_step("t-late", run.interrupt_id, 2, "recover", detail, None) is None
    # the sweep that comes late expires it, with no reminder or escalation first
    assert [o.status for o in runner.sweeper.sweep()] == ["expired"]
    runner.sweeper.flush_outbox()
    got = events(receiver, "t-late")
    assert set(got) == {"approval.requested", "approval.expired"}, got
    assert got["approval.expired"] == iso(clock.now)
    assert outcome.status == "waiting"


def test_a_request_past_its_deadline_is_no_longer_listed_as_waiting(store, clock):
    runner = runner_at(store, clock)
    waiting(runner, "t-past", expires_in="1h")
    waiting(runner, "t-open", expires_in="10h")
    order = ("updated_at", "desc")

    def listed(status: str) -> dict[str, str]:
        rows = threads_page(store.db, status, QueueFilter(), None, order, 0, 10, clock.now)
        return {r.thread_id: r.status for r in rows}

    def queued() -> set[str]:
        return {r.thread_id for r in queue_page(store.db, "bob", QueueFilter(), now=clock.now)}

    assert queued() == {"t-past", "t-open"}
    assert set(listed("interrupted")) == {"t-past", "t-open"}
    clock.now += 2 * HOUR  # past t-past's deadline; no sweep has run
    assert runner.runs.get("t-past").status == "waiting"  # not written down yet
    assert queued() == {"t-open"}
    assert queue_count(store.db, "bob", QueueFilter(), clock.now) == 1
    assert set(listed("interrupted")) == {"t-open"}
    assert threads_count(store.db, "interrupted", QueueFilter(), clock.now) == 1
    assert threads_count(store.db, "idle", QueueFilter(), clock.now) == 1
    assert listed("idle") == {"t-past": "expired"}  # idle, as LangGraph shows an ended thread
    assert listed("")["t-past"] == "expired"  # any status: shown as what it already is
    shown = thread_view(runner, Thread("t-past", runner.runs.get("t-past"), None))
    assert (shown["status"], shown["interrupts"]) == ("idle", {})  # one thread read, the same
    assert shown["metadata"]["status"] == "expired"
    still = thread_view(runner, Thread("t-open", runner.runs.get("t-open"), None))
    assert still["status"] == "interrupted" and still["interrupts"]
    FLUSHER.wait()


def test_a_run_read_past_its_deadline_reads_expired(store, clock):
    runner = runner_at(store, clock)
    waiting(runner, "t-read", expires_in="1h")
    run = runner.runs.get("t-read")
    assert run.status_at(clock.now) == "waiting"
    assert run.status_at(run.expires_at) == "expired"  # the deadline itself is past
    assert run.status == "waiting"  # what the row says until a sweep writes it down
