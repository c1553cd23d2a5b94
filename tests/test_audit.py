"""The audit trail proves itself, on both backends: among 10,000 events an untouched trail
verifies, and an edited, deleted, inserted, swapped or reordered event is named by run and
position, by ``approval-worker audit verify`` and ``recover.py --verify-audit``; concurrent
appends never fork a chain; signed anchors catch a run whose whole chain was recomputed, a run
deleted outright and an anchor edited or removed; retention keeps it all verifiable; the sweep
anchors once per period; a JSONL export verifies alone with the key (anchors included) and fails
after a one-byte change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from core import proof
from core.hitl import HitlRequest
from store import anchors, audit
from store.audit_trail import AuditTrail
from store.claimed import take_next
from store.retention import FinishedRun, delete_run
from store.runs import RunStore
from store.states import Status
from store.verify import Break, Verified, verify
from testkit import zygote
from testkit.anchoring import make_keys
from testkit.databases import ROOT
from worker.export import jsonl, records, verify_export

RUNS, PER_RUN = 100, 100  # 10,000 events
KEY = "k" * 40
COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")


def bulk_trail(db, runs: int = RUNS, per_run: int = PER_RUN, at: float = 1.7e9) -> None:
    """``runs`` x ``per_run`` side-effect events through the store's bulk writer (one
    transaction, rows sent together), chained exactly as one-by-one appends would be."""
    events = [
        {
            "thread_id": f"t-{r:02d}",
            "at": at + r * per_run + i,
            "actor": "tester",
            "from_status": None,
            "to_status": None,
            "reason": "side effect",
            "detail": json.dumps({"n": i, "note": "é"}),
        }
        for r in range(runs)
        for i in range(per_run)
    ]
    with db.transaction() as tx:
        audit.append_many(tx, events)


@pytest.fixture
def trail(store):
    bulk_trail(store.db)
    return store.db


@pytest.fixture
def keys(anchor_keys):
    return anchor_keys


def counts(result) -> tuple[int, int, int, int, int]:
    assert isinstance(result, Verified), result
    return (result.runs, result.events, result.unchained, result.pruned_runs, result.pruned_events)


def cli(*args: str, key: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"AUDIT_ANCHOR_KEY": key} if key else {}), **(env or {})}
    return zygote.run(
        [COMMAND, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def _row(db, thread_id: str, seq: int) -> dict:
    return db.one(
        "SELECT * FROM run_events WHERE thread_id = :t AND seq = :s", {"t": thread_id, "s": seq}
    )


def _broken(db, trust: proof.Trust | None = None) -> Break:
    broken = verify(db, trust)
    assert isinstance(broken, Break), broken
    return broken


def test_a_bulk_load_chains_like_single_appends(store):
    RunStore(store.db).record("t-00", "tester", "side effect", {"n": -1})
    bulk_trail(store.db, runs=2, per_run=3)
    one_by_one = RunStore(store.db)
    for i in range(3):
        one_by_one.record("t-01", "tester", "side effect", {"n": 3 + i})
    assert [e.seq for e in one_by_one.events("t-00")] == [1, 2, 3, 4]
    assert counts(verify(store.db)) == (2, 10, 0, 0, 0)


def test_an_untouched_trail_verifies_from_the_command(trail):
    assert counts(verify(trail)) == (RUNS, RUNS * PER_RUN, 0, 0, 0)
    done = cli("audit", "verify")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("audit trail verifies: 10000 events in 100 runs")


def _update(db) -> tuple[str, int]:
    db.execute(
        "UPDATE run_events SET detail = :d WHERE thread_id = 't-04' AND seq = 37",
        {"d": json.dumps({"n": 3600})},
    )
    return "t-04", 37


def _delete(db) -> tuple[str, int]:
    db.execute("DELETE FROM run_events WHERE thread_id = 't-77' AND seq = 50")
    return "t-77", 50


def _insert(db) -> tuple[str, int]:
    """A forged event linked properly after t-52's head, whose hash cannot match."""
    last = _row(db, "t-52", PER_RUN)
    db.execute(
        "INSERT INTO run_events (thread_id, at, actor, reason, detail, seq, prev_hash, hash) "
        "VALUES ('t-52', :at, 'mallory', 'side effect', '{}', :seq, :prev, :hash)",
        {"at": last["at"], "seq": PER_RUN + 1, "prev": last["hash"], "hash": last["hash"]},
    )
    return "t-52", PER_RUN + 1


def _swap(db) -> tuple[str, int]:
    """Two events of t-95 trade places (their positions exchanged)."""
    a, b = _row(db, "t-95", 20), _row(db, "t-95", 60)
    db.execute("UPDATE run_events SET seq = -1 WHERE id = :id", {"id": a["id"]})
    db.execute("UPDATE run_events SET seq = 20 WHERE id = :id", {"id": b["id"]})
    db.execute("UPDATE run_events SET seq = 60 WHERE id = :id", {"id": a["id"]})
    return "t-95", 20


@pytest.mark.parametrize("tamper", [_update, _delete, _insert, _swap])
def test_one_tampered_event_among_10000_is_named_by_run_and_position(trail, tamper):
    thread_id, position = tamper(trail)
    broken = _broken(trail)
    assert (broken.thread_id, broken.position) == (thread_id, position)
    done = cli("audit", "verify")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"audit trail broken: run {thread_id}, position {position} " in done.stdout


def test_recover_verify_audit_names_the_break(trail):
    _update(trail)
    done = zygote.run(
        [sys.executable, str(ROOT / "recover.py"), "--verify-audit"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and "run t-04, position 37" in done.stdout, done.stdout


def test_a_reordered_pair_and_a_content_swap_are_found(trail):
    a, b = _row(trail, "t-05", 20), _row(trail, "t-05", 60)
    for row, other in ((a, b), (b, a)):
        trail.execute(
            "UPDATE run_events SET detail = :d WHERE id = :id",
            {"d": other["detail"], "id": row["id"]},
        )
    assert (_broken(trail).thread_id, _broken(trail).position) == ("t-05", 20)


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
    assert [e.seq for e in runs.events("t-race")] == list(range(1, 101))
    assert counts(verify(store.db)) == (1, 100, 0, 0, 0)


def test_transitions_racing_side_effect_events_never_fork_a_chain(store):
    """A transition reads its chain's head inside its own UPDATE (on Postgres, under the
    chain's lock, through ``approval_chain_head``); plain appends read it on their own. Both
    at once on one run still make one unbroken chain."""
    runs = RunStore(store.db)
    assert runs.create("t-mixed", "refund", {"text": "x"}, "owner-a") is not None

    def transitions() -> None:
        for _ in range(15):
            failed = runs.mark_failed("t-mixed", "owner-a", Status.RUNNING, "boom")
            assert failed is not None
            assert runs.retry("t-mixed", failed.attempts, Status.RUNNING, "owner-a") is not None
            # a retry is queued like a claim; owner-a takes it up (one more event) to fail again
            assert take_next(runs, "owner-a", runs.clock() + 60) is not None

    def appends(who: str) -> None:
        for i in range(20):
            runs.record("t-mixed", who, "side effect", {"n": i})

    threads = [threading.Thread(target=transitions)]
    threads += [threading.Thread(target=appends, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = runs.events("t-mixed")
    assert [e.seq for e in events] == list(range(1, 1 + 1 + 45 + 40))
    assert sum(e.to_status == Status.FAILED for e in events) == 15
    assert counts(verify(store.db)) == (1, 86, 0, 0, 0)


def _recompute(db, thread_id: str, change_seq: int) -> None:
    """What the chain alone cannot show: an edit with the run's whole chain recomputed."""
    rows = db.all("SELECT * FROM run_events WHERE thread_id = :t ORDER BY seq", {"t": thread_id})
    prev = proof.GENESIS
    for row in rows:
        if row["seq"] == change_seq:
            row["detail"] = json.dumps({"n": 999999})
        row["prev_hash"] = prev
        row["hash"] = proof.event_hash(prev, row)
        db.execute(
            "UPDATE run_events SET detail = :detail, prev_hash = :prev_hash, hash = :hash "
            "WHERE id = :id",
            row,
        )
        prev = row["hash"]


def test_anchors_catch_what_the_chain_cannot(trail, keys):
    first = anchors.write(trail, keys.signer, time.time())
    assert first["seq"] == 1 and len(first["heads"]) == RUNS
    assert first["alg"] == "ed25519" and first["kid"] == keys.signer.kid
    verified = verify(trail, keys.trust())
    assert isinstance(verified, Verified) and verified.anchors == 1
    _recompute(trail, "t-33", 5)
    broken = _broken(trail, keys.trust())
    assert (broken.thread_id, broken.position) == ("t-33", PER_RUN)
    assert "rewritten" in broken.problem
    done = cli("audit", "verify", env=keys.verifying_env())
    assert done.returncode == 1 and "run t-33, position 100" in done.stdout, done.stdout


def test_a_run_deleted_outright_is_missing_from_its_anchor(trail, keys):
    anchors.write(trail, keys.signer, time.time())
    trail.execute("DELETE FROM run_events WHERE thread_id = 't-61'")
    broken = _broken(trail, keys.trust())
    assert (broken.thread_id, broken.position) == ("t-61", PER_RUN)
    assert "missing" in broken.problem


def test_edited_or_removed_anchors_are_found(trail, keys, tmp_path):
    now = time.time()
    for i in range(3):
        anchors.write(trail, keys.signer, now + i)
    trail.execute("UPDATE audit_anchors SET at = at + 1 WHERE seq = 2")
    assert "signature" in _broken(trail, keys.trust()).problem
    other = make_keys(tmp_path / "other")
    assert "not a trusted key" in _broken(trail, other.trust()).problem
    assert "not a trusted key" in _broken(trail).problem  # no keys: never a pass
    trail.execute("DELETE FROM audit_anchors WHERE seq = 2")
    assert str(_broken(trail, keys.trust())).startswith("anchor 2: is missing (deleted")


def _finished(runs: RunStore, thread_id: str) -> None:
    runs.create(thread_id, "refund", "x", "w1")
    runs.mark_done(thread_id, "w1", "running", "ok")


def test_pruning_keeps_the_trail_and_its_anchors_verifiable(store, trail, keys):
    runs = RunStore(store.db)
    _finished(runs, "t-old")
    _finished(runs, "t-new")
    anchors.write(store.db, keys.signer, time.time())
    old = runs.get("t-old")
    assert delete_run(store.db, FinishedRun(old.thread_id, old.status, old.updated_at), "x:t-old")
    unsigned = _broken(store.db, keys.trust())  # until an anchor signs the prune record
    assert unsigned.thread_id == "t-old" and "no anchor signs its prune record" in unsigned.problem
    anchors.write(store.db, keys.signer, time.time() + 1)
    result = verify(store.db, keys.trust())
    assert counts(result) == (RUNS + 1, RUNS * PER_RUN + 2, 0, 1, 2)
    _update(trail)  # a break among the rest is still named
    broken = _broken(store.db, keys.trust())
    assert (broken.thread_id, broken.position) == ("t-04", 37)
    trail.execute(  # put back as it was: the trail verifies again
        "UPDATE run_events SET detail = :d WHERE thread_id = 't-04' AND seq = 37",
        {"d": json.dumps({"n": 36, "note": "é"})},
    )
    assert isinstance(verify(store.db, keys.trust()), Verified)
    pruned = store.db.one("SELECT * FROM audit_pruned WHERE thread_id = 't-old'")
    assert pruned["events"] == 2 and pruned["head_hash"]  # the range pruned, and its head
    store.db.execute("UPDATE audit_pruned SET head_hash = 'f' WHERE thread_id = 't-old'")
    assert _broken(store.db, keys.trust()).thread_id == "t-old"  # it must match the signed one


def test_newest_events_deleted_are_found_against_the_run(store):
    runs = RunStore(store.db)
    _finished(runs, "t-cut")
    store.db.execute("DELETE FROM run_events WHERE thread_id = 't-cut' AND seq = 2")
    broken = _broken(store.db)
    assert broken.thread_id == "t-cut" and "newest events deleted" in broken.problem


def test_the_sweep_anchors_once_per_period_where_it_holds_the_key(store, keys, monkeypatch):
    from worker.runner import Runner

    for name, value in keys.signing_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AUDIT_ANCHOR_EVERY", "1h")
    now = [time.time()]
    runner = Runner(store, clock=lambda: now[0])
    _finished(runner.runs, "t-a")
    now[0] += 1000  # t-a is older than the next anchor's overlap with this one
    runner.recovery_pass()
    runner.recovery_pass()
    assert [a["seq"] for a in anchors.stored(store.db)] == [1]
    now[0] += 3601
    _finished(runner.runs, "t-b")
    runner.recovery_pass()
    second = anchors.stored(store.db)[-1]
    assert second["seq"] == 2 and [h[0] for h in second["heads"]] == ["t-b"]
    assert isinstance(verify(store.db, keys.trust()), Verified)


def _decided(runs: RunStore, n: int) -> None:
    for i in range(n):
        runs.create(f"t-x{i}", "refund", "x", "w1", requested_by="rita")
        runs.mark_waiting(f"t-x{i}", "w1", "running", f"i{i}", [], HitlRequest(()), shown=[])
        runs.claim(
            f"t-x{i}",
            f"i{i}",
            {"decisions": [{"type": "approve"}]},
            "api",
            decided=[],
            approvers=["fay"],
            source="api",
        )


def test_a_jsonl_export_verifies_alone_and_fails_after_a_one_byte_change(runner, keys):
    _decided(runner.runs, 3)
    db = runner.store.db
    anchors.write(db, keys.signer, time.time())
    trust = keys.trust(hmac_key=KEY)
    data = "".join(
        jsonl(records(AuditTrail(db), 0, 2e9), KEY, anchors.in_period(db, 0, 2e9))
    ).encode()
    lines = data.decode().splitlines()
    assert len(lines) == 5  # 3 records, 1 signed anchor, the file's anchor
    first = json.loads(lines[0])
    assert first["approvers"] == ["fay"] and first["outcome"] == "approve"
    assert first["requested_by"] == "rita" and first["hash"] and first["position"] == 3
    assert json.loads(lines[3])["audit_anchor"]["heads"][0] == ["t-x0", 3, first["hash"]]
    assert verify_export(data, KEY, trust) is None
    changed = bytearray(data)
    changed[data.index(b"fay") + 1] = ord("o")
    assert verify_export(bytes(changed), KEY, trust) is not None
    assert verify_export(data, "z" * 40, trust) is not None
    assert verify_export(data.replace(lines[1].encode() + b"\n", b""), KEY, trust) is not None
    assert "not a trusted key" in (verify_export(data, KEY) or "")  # the public key is needed


def test_an_export_of_a_rewritten_trail_fails_against_its_anchors(runner, keys):
    _decided(runner.runs, 2)
    db = runner.store.db
    anchors.write(db, keys.signer, time.time())
    _recompute(db, "t-x1", 1)  # rewritten after it was anchored; the file is signed anew
    data = "".join(
        jsonl(records(AuditTrail(db), 0, 2e9), KEY, anchors.in_period(db, 0, 2e9))
    ).encode()
    problem = verify_export(data, KEY, keys.trust(hmac_key=KEY))
    assert problem and "run t-x1, position 3" in problem and "anchor 1" in problem


def test_the_command_exports_and_verifies_a_file(runner, tmp_path, keys):
    _decided(runner.runs, 2)
    anchored = cli("audit", "anchor", env=keys.signing_env())
    assert anchored.stdout.startswith(
        f"anchor 1 signed with key {keys.signer.kid} over 2 run heads"
    )
    env = keys.verifying_env()
    args = ("audit", "export", "--from", "2000-01-01", "--to", "2100-01-01")
    exported = cli(*args, "--format", "jsonl", key=KEY)
    assert exported.returncode == 0, exported.stderr
    path = tmp_path / "export.jsonl"
    path.write_text(exported.stdout)
    assert cli("audit", "verify-export", str(path), key=KEY, env=env).stdout == "export verifies\n"
    path.write_text(exported.stdout.replace('"fay"', '"fey"', 1))
    refused = cli("audit", "verify-export", str(path), key=KEY, env=env)
    assert refused.returncode == 1 and "does not verify" in refused.stdout
    table = cli(*args, "--format", "csv").stdout.splitlines()
    assert table[0].startswith("thread_id,workflow") and len(table) == 3
