"""Run ids the worker draws itself never land on an existing run: a repeated id is drawn again
(the start gets its own run), a generator that keeps repeating is refused loudly with nothing
written, and ids chosen by a client stay in that client's own scope. On both backends, over
real HTTP to the app served in this process (so its id source can be swapped for a broken one).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import httpx
import pytest

from api.app import create_app
from api.runs import scoped_thread_id
from store.keys import KeyStore, parse_groups, parse_roles
from store.run_ids import ATTEMPTS, new_run_id
from testkit import loopback
from testkit.servers import LOCAL_SECRET, serve_app
from worker.refusals import Refusal, Refused
from worker.runner import Runner

A1001 = "Refund order A-1001: broken"
A1003 = "Refund order A-1003: the pan cracked"


class Repeating:
    """An id source that hands out ``ids`` in turn, then the last one for ever: a generator
    broken on purpose."""

    def __init__(self, *ids: str):
        self.ids = list(ids)
        self.drawn: list[str] = []

    def __call__(self) -> str:
        drawn = self.ids.pop(0) if len(self.ids) > 1 else self.ids[0]
        self.drawn.append(drawn)
        return drawn


def tables(db) -> tuple[list, list]:
    return db.all("SELECT * FROM runs ORDER BY thread_id"), db.all("SELECT * FROM run_events")


@pytest.fixture
def served(backend, monkeypatch) -> Iterator[tuple[str, Runner, dict[str, dict]]]:
    """The app under uvicorn in this process, its runner, and the headers of two requesters
    (rita, ron) and an operator (olga)."""
    monkeypatch.setenv("WEBHOOK_SECRET", LOCAL_SECRET)
    app = create_app()
    with serve_app(app) as url:
        runner: Runner = app.state.runner
        keys = KeyStore(runner.store.db)
        headers = {}
        for name, role in (("rita", "requester"), ("ron", "requester"), ("olga", "operator")):
            _, token = keys.create(name, parse_roles([role]), parse_groups(()), None)
            headers[name] = {"authorization": f"Bearer {token}"}
        yield url, runner, headers


def start(url: str, who: dict, text: str, **body: str) -> httpx.Response:
    return loopback.post(f"{url}/runs", json={"input": text, **body}, headers=who, timeout=60)


def test_a_repeated_id_is_drawn_again_and_the_second_start_gets_its_own_run(served, caplog):
    """Then a generator that never stops repeating: the start is refused (the two share one
    app, as each app's start-up is the slow part of these tests)."""
    url, runner, who = served
    runner.lifecycle.run_ids = Repeating("thread_same", "thread_same", "thread_next")
    first = start(url, who["rita"], A1001)
    assert first.status_code == 201, first.text
    assert first.json()["thread_id"] == "thread_same"
    before = runner.store.db.all("SELECT * FROM runs WHERE thread_id = 'thread_same'")

    with caplog.at_level(logging.WARNING, logger="worker.lifecycle"):
        second = start(url, who["ron"], A1003)
    assert second.status_code == 201, second.text  # a new run, not "the run already exists"
    assert second.json()["thread_id"] == "thread_next"
    assert second.json()["requested_by"] == "ron"
    assert "the id thread_same drawn for a new run names an existing run" in caplog.text

    # rita's run is exactly as it was; ron cannot see it, and sees his own
    assert runner.store.db.all("SELECT * FROM runs WHERE thread_id = 'thread_same'") == before
    assert loopback.get(f"{url}/runs/thread_same", headers=who["ron"]).status_code == 404
    mine = loopback.get(f"{url}/runs/thread_next", headers=who["ron"]).json()
    assert mine["requested_by"] == "ron" and mine["status"] == "done"  # its own refund ran
    assert mine["result"].startswith("Refunded 15.50 EUR for order A-1003")
    inputs = {
        r["thread_id"]: r["input"] for r in runner.store.db.all("SELECT thread_id, input FROM runs")
    }
    assert set(inputs) == {"thread_same", "thread_next"}
    assert A1001 in inputs["thread_same"] and A1003 in inputs["thread_next"]
    started = [
        e["thread_id"] for e in runner.store.db.all("SELECT * FROM run_events")
        if e["reason"] == "started"
    ]  # fmt: skip
    assert sorted(started) == ["thread_next", "thread_same"]

    # a generator that keeps repeating: refused loudly, and nothing is written
    runner.lifecycle.run_ids = broken = Repeating("thread_same")
    before = tables(runner.store.db)

    again = start(url, who["ron"], A1003)
    assert again.status_code == 409
    error = again.json()["error"]
    assert error["code"] == "id_taken"
    assert f"each of the {ATTEMPTS} ids drawn for it named an existing run" in error["message"]
    assert tables(runner.store.db) == before
    assert broken.drawn == ["thread_same"] * ATTEMPTS


def test_drawn_ids_are_uuid4_old_short_ids_work_and_chosen_ids_stay_scoped(served):
    url, runner, who = served
    runner.lifecycle.start(A1001, thread_id="thread_7c1e4b2a", requested_by="rita")  # as before
    old = loopback.get(f"{url}/runs/thread_7c1e4b2a", headers=who["rita"])
    assert old.status_code == 200 and old.json()["status"] == "waiting"

    new = start(url, who["rita"], A1003)
    assert new.status_code == 201
    assert re.fullmatch(r"thread_[0-9a-f]{32}", new.json()["thread_id"])
    uuid4 = new.json()["thread_id"].removeprefix("thread_")
    assert uuid4[12] == "4" and uuid4[16] in "89ab"  # version 4, RFC 4122 variant
    assert len({new_run_id() for _ in range(10_000)}) == 10_000

    # a chosen id naming someone else's run is scoped to its chooser, as it always was
    ritas = start(url, who["rita"], A1001, thread_id="t-order")
    assert ritas.status_code == 201
    assert ritas.json()["thread_id"] == scoped_thread_id("rita", "t-order")
    ritas_run = {"t": ritas.json()["thread_id"]}
    rita_row = runner.store.db.all("SELECT * FROM runs WHERE thread_id = :t", ritas_run)

    # ron chooses the same name, then rita's run id itself: each is a new run of his own
    for chosen in ("t-order", ritas.json()["thread_id"]):
        rons = start(url, who["ron"], A1003, thread_id=chosen)
        assert rons.status_code == 201, rons.text
        assert rons.json()["thread_id"] == scoped_thread_id("ron", chosen)
        assert rons.json()["requested_by"] == "ron"
    assert runner.store.db.all("SELECT * FROM runs WHERE thread_id = :t", ritas_run) == rita_row
    # and rita's chosen id again answers her own run (200), not a new one
    same = start(url, who["rita"], A1001, thread_id="t-order")
    assert same.status_code == 200 and same.json()["thread_id"] == ritas.json()["thread_id"]


def test_the_runner_draws_from_the_source_it_is_given(store):
    """The in-process entry points (``run.py``, ``approval-worker run``, the example) start
    through ``Runner.start`` without an id: the same retry, without HTTP."""
    runner = Runner(store, run_ids=Repeating("thread_a", "thread_a", "thread_b", "thread_b"))
    assert runner.start(A1001, requested_by="rita").thread_id == "thread_a"
    second = runner.start(A1003, requested_by="ron")
    assert (second.thread_id, second.started) == ("thread_b", True)
    assert runner.runs.get("thread_b").requested_by == "ron"
    with pytest.raises(Refused) as refused:
        runner.start(A1003, requested_by="ron")
    assert refused.value.reason == Refusal.ID_TAKEN
    assert [r["thread_id"] for r in tables(store.db)[0]] == ["thread_a", "thread_b"]
