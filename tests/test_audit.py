"""The audit trail proves itself, on both backends: an untouched trail verifies; an edited,
deleted, inserted or reordered event among 1,000 is found by run and position; concurrent
appends never fork a chain; retention keeps it verifiable; a JSONL export verifies alone with
the anchor key and fails after a one-byte change."""

from __future__ import annotations

import json
import threading

import pytest

from store import audit
from store.retention import FinishedRun, delete_run
from store.runs import RunStore
from worker.audit import jsonl, records, verify_export

RUNS, PER_RUN = 10, 100  # 1,000 events; bench/ measures 10,000
KEY = "k" * 40


@pytest.fixture
def trail(store):
    runs = RunStore(store.db)
    for r in range(RUNS):
        for i in range(PER_RUN):
            runs.record(f"t-{r:02d}", "tester", "side effect", {"n": i, "note": "é"})
    return store.db


def _row(db, thread_id: str, seq: int) -> dict:
    return db.one(
        "SELECT * FROM run_events WHERE thread_id = :t AND seq = :s", {"t": thread_id, "s": seq}
    )


def test_an_untouched_trail_verifies(trail):
    result = audit.verify(trail)
    assert result == audit.Verified(RUNS, RUNS * PER_RUN, 0, 0, 0)


def test_an_edited_event_is_found(trail):
    trail.execute(
        "UPDATE run_events SET detail = :d WHERE thread_id = 't-04' AND seq = 37",
        {"d": json.dumps({"n": 3600})},
    )
    broken = audit.verify(trail)
    assert isinstance(broken, audit.Break)
    assert (broken.thread_id, broken.position) == ("t-04", 37)
    assert "edited" in broken.problem


def test_a_deleted_event_is_found(trail):
    trail.execute("DELETE FROM run_events WHERE thread_id = 't-07' AND seq = 50")
    broken = audit.verify(trail)
    assert (broken.thread_id, broken.position) == ("t-07", 50)
    assert "deleted, inserted or reordered" in broken.problem


def test_an_inserted_event_is_found(trail):
    before = _row(trail, "t-02", 10)
    trail.execute(
        "INSERT INTO run_events (thread_id, at, actor, reason, detail) "
        "VALUES ('t-02', :at, 'mallory', 'side effect', '{}')",
        {"at": before["at"]},
    )
    broken = audit.verify(trail)
    assert broken.thread_id == "t-02" and broken.position == PER_RUN + 1
    forged = dict(before, seq=PER_RUN + 1, actor="mallory")
    trail.execute("DELETE FROM run_events WHERE actor = 'mallory'")
    # a forger who links it properly but cannot make the content match is found too
    last = _row(trail, "t-02", PER_RUN)
    trail.execute(
        "INSERT INTO run_events (thread_id, at, actor, reason, detail, seq, prev_hash, hash) "
        "VALUES ('t-02', :at, 'mallory', 'side effect', '{}', :seq, :prev, :hash)",
        {"at": forged["at"], "seq": PER_RUN + 1, "prev": last["hash"], "hash": last["hash"]},
    )
    broken = audit.verify(trail)
    assert (broken.thread_id, broken.position) == ("t-02", PER_RUN + 1)
    assert "edited" in broken.problem


def test_swapped_events_are_found(trail):
    a, b = _row(trail, "t-05", 20), _row(trail, "t-05", 60)
    for row, other in ((a, b), (b, a)):
        trail.execute(
            "UPDATE run_events SET detail = :d WHERE id = :id",
            {"d": other["detail"], "id": row["id"]},
        )
    broken = audit.verify(trail)
    assert (broken.thread_id, broken.position) == ("t-05", 20)


def test_reordered_events_are_found(trail):
    a, b = _row(trail, "t-09", 3), _row(trail, "t-09", 4)
    trail.execute("UPDATE run_events SET seq = -1 WHERE id = :id", {"id": a["id"]})
    trail.execute("UPDATE run_events SET seq = 3 WHERE id = :id", {"id": b["id"]})
    trail.execute("UPDATE run_events SET seq = 4 WHERE id = :id", {"id": a["id"]})
    broken = audit.verify(trail)
    assert (broken.thread_id, broken.position) == ("t-09", 3)


def test_concurrent_appends_never_fork_a_chain(store):
    runs = RunStore(store.db)

    def write(who: str) -> None:
        for i in range(25):
            runs.record("t-race", who, "side effect", {"n": i})

    threads = [threading.Thread(target=write, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [e["seq"] for e in runs.events("t-race")] == list(range(1, 101))
    assert audit.verify(store.db) == audit.Verified(1, 100, 0, 0, 0)


def _finished(runs: RunStore, thread_id: str) -> None:
    runs.create(thread_id, "refund", "x", "w1")
    runs.mark_done(thread_id, "w1", "running", "ok")


def test_pruning_keeps_the_trail_verifiable(store):
    runs = RunStore(store.db)
    _finished(runs, "t-old")
    _finished(runs, "t-new")
    old = runs.get("t-old")
    assert delete_run(store.db, FinishedRun(old.thread_id, old.status, old.updated_at), "x:t-old")
    assert audit.verify(store.db) == audit.Verified(1, 2, 0, 1, 2)


def test_newest_events_deleted_are_found_against_the_run(store):
    runs = RunStore(store.db)
    _finished(runs, "t-cut")
    store.db.execute("DELETE FROM run_events WHERE thread_id = 't-cut' AND seq = 2")
    broken = audit.verify(store.db)
    assert broken.thread_id == "t-cut" and "newest events deleted" in broken.problem


def test_a_jsonl_export_verifies_alone_and_fails_after_a_one_byte_change(runner):
    runs = runner.runs
    for i in range(3):
        runs.create(f"t-x{i}", "refund", "x", "w1", requested_by="rita")
        runs.mark_waiting(f"t-x{i}", "w1", "running", f"i{i}", [], {}, shown=[])
        runs.claim(
            f"t-x{i}",
            f"i{i}",
            {"decisions": [{"type": "approve"}]},
            "api",
            decided=[],
            approvers=["fay"],
            source="api",
        )
    data = "".join(jsonl(records(runner.store.db, 0, 2e9), KEY)).encode()
    lines = data.decode().splitlines()
    assert len(lines) == 4
    first = json.loads(lines[0])
    assert first["approvers"] == ["fay"] and first["outcome"] == "approve"
    assert first["requested_by"] == "rita" and first["hash"] and first["position"] == 3
    assert verify_export(data, KEY) is None
    changed = bytearray(data)
    changed[data.index(b"fay") + 1] = ord("o")
    assert verify_export(bytes(changed), KEY) is not None
    assert verify_export(data, "z" * 40) is not None
    assert verify_export(data.replace(lines[1].encode() + b"\n", b""), KEY) is not None
