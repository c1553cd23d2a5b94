"""The tamper table (issue 35): each way someone who can write the database tried to make
``audit verify`` pass on a doctored trail, and how verify names it now. In process against both
backends with an injected clock; one case through the installed command.

| attack                                                      | named as                        |
|-------------------------------------------------------------|---------------------------------|
| every anchor deleted, a run rewritten and re-hashed         | witness: anchor deleted; run    |
|                                                             | rewritten; without the witness: |
|                                                             | events no anchor covers         |
| the newest anchor deleted, a run only it covered rewritten  | witness: anchor deleted; run    |
| an anchored run deleted, a fake ``audit_pruned`` row        | prune record no anchor signs    |
| an unhashed "approved by bob" event in front of a run       | not in the genesis record       |
| every hash of an unanchored run nulled                      | not in the genesis record       |
| newest events of a run in the unanchored window rewritten   | the window stated; named once   |
|                                                             | it is older than the limit      |
| an old HMAC anchor emptied, its key not at hand             | cannot be checked (a failure)   |
| an anchor deleted from the middle                           | anchor missing                  |
| the witness truncated (its tail, its head)                  | anchor not in the witness       |
| a key rotation, the old public key no longer trusted        | key not trusted                 |
| the whole chain re-signed with a key not in the trusted set | key not trusted                 |
"""

from __future__ import annotations

import json
import os

import pytest

from core import proof
from store import anchors, audit
from store.audit_trail import AuditTrail
from store.verify import Break, Verified, verify
from testkit import zygote
from testkit.anchoring import AnchorKeys, make_keys
from testkit.databases import ROOT
from worker.audit import anchor_now

T0 = 1_800_000_000.0
LIMIT = 2 * 60 + proof.GRACE  # AUDIT_ANCHOR_EVERY=1m's limit
OLD_KEY = "h" * 40
COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")


def events(db, thread_id: str, n: int, at: float) -> None:
    rows = [
        {
            "thread_id": thread_id,
            "at": at + i,
            "actor": "tester",
            "from_status": None,
            "to_status": None,
            "reason": "side effect",
            "detail": json.dumps({"n": i}),
        }
        for i in range(n)
    ]
    with db.transaction() as tx:
        audit.append_many(tx, rows)


class Scene:
    """Runs r0..r4 (6 events each), anchor 1, run r5, anchor 2, run r6 (in the window),
    each anchor also in the witness file."""

    def __init__(self, db, keys: AnchorKeys, folder, monkeypatch):
        self.db, self.keys = db, keys
        self.witness = folder / "anchors.witness"
        monkeypatch.setenv("AUDIT_WITNESS_FILE", str(self.witness))
        for r in range(5):
            events(db, f"r{r}", 6, T0 + r * 10)
        self.anchor(T0 + 100)
        events(db, "r5", 3, T0 + 200)
        self.anchor(T0 + 300)
        events(db, "r6", 3, T0 + 350)

    def anchor(self, at: float, keys: AnchorKeys | None = None) -> dict:
        written = anchor_now(AuditTrail(self.db), (keys or self.keys).signer, at, None)
        assert written is not None
        return written

    def check(self, *, witness: bool = True, trust=None, now: float = T0 + 400) -> Break | Verified:
        copies = proof.read_witness(self.witness.read_text().splitlines()) if witness else None
        return verify(self.db, trust or self.keys.trust(), witness=copies, now=now, limit=LIMIT)

    def problems(self, **kwargs) -> list[str]:
        result = self.check(**kwargs)
        assert isinstance(result, Break), result
        return [str(b) for b in result.all]

    def rewrite(self, thread_id: str, seq: int) -> None:
        """An edit with the run's whole chain recomputed: the chain alone cannot show it."""
        rows = self.db.all(
            "SELECT * FROM run_events WHERE thread_id = :t ORDER BY seq", {"t": thread_id}
        )
        prev = proof.GENESIS
        for row in rows:
            if row["seq"] == seq:
                row["detail"] = json.dumps({"n": "approved by bob"})
            row["prev_hash"] = prev
            row["hash"] = proof.event_hash(prev, row)
            self.db.execute(
                "UPDATE run_events SET detail = :detail, prev_hash = :prev_hash, hash = :hash "
                "WHERE id = :id",
                row,
            )
            prev = row["hash"]


@pytest.fixture
def scene(store, anchor_keys, tmp_path, monkeypatch):
    return Scene(store.db, anchor_keys, tmp_path, monkeypatch)


def has(problems: list[str], *parts: str) -> bool:
    return any(all(p in line for p in parts) for line in problems)


def test_the_untouched_trail_verifies_and_states_its_window(scene):
    result = scene.check()
    assert isinstance(result, Verified) and result.witnessed and result.anchors == 2
    assert (result.window_events, result.window_runs) == (3, 1)  # r6, newer than anchor 2


def test_every_anchor_deleted_and_a_run_rewritten(scene):
    scene.db.execute("DELETE FROM audit_anchors")
    scene.rewrite("r1", 2)
    found = scene.problems()
    assert has(found, "anchor 1: is in the witness but not in the database (deleted)")
    assert has(found, "anchor 2: is in the witness but not in the database (deleted)")
    assert has(found, "run r1, position 6: anchored by anchor 1", "rewritten")
    alone = scene.problems(witness=False, now=T0 + 1000)  # no witness: older than the limit
    assert has(alone, "event(s) no anchor covers", "anchor job is not running")


def test_the_newest_anchor_deleted_and_a_run_only_it_covered_rewritten(scene):
    scene.db.execute("DELETE FROM audit_anchors WHERE seq = 2")
    scene.rewrite("r5", 1)
    found = scene.problems()
    assert has(found, "anchor 2: is in the witness but not in the database (deleted)")
    assert has(found, "run r5, position 3: anchored by anchor 2", "rewritten")
    window = scene.check(witness=False)  # without the witness: inside the window, and said so
    assert isinstance(window, Verified) and window.window_runs == 2
    later = scene.problems(witness=False, now=T0 + 200 + LIMIT + 1)
    assert has(later, "no anchor covers", "anchors deleted")


def test_an_anchored_run_deleted_behind_a_fake_prune_record(scene):
    head = scene.db.one("SELECT hash FROM run_events WHERE thread_id = 'r2' AND seq = 6")
    scene.db.execute("DELETE FROM run_events WHERE thread_id = 'r2'")
    scene.db.execute(
        "INSERT INTO audit_pruned (thread_id, events, head_hash, pruned_at) "
        "VALUES ('r2', 6, :h, :at)",
        {"h": head["hash"], "at": T0 + 390},
    )
    found = scene.problems(witness=False)
    assert has(found, "run r2, position 6: pruned, but no anchor signs its prune record")


def test_an_unhashed_event_put_in_front_of_a_run(scene):
    scene.db.execute(
        "INSERT INTO run_events (id, thread_id, at, actor, reason, detail) "
        "VALUES (-1, 'r3', :at, 'bob', 'approved', '{\"by\": \"bob\"}')",
        {"at": T0 - 1},
    )
    found = scene.problems(witness=False)
    assert has(found, "run r3, position 1: 1 event(s) without a place in the chain", "genesis")


def test_every_hash_of_an_unanchored_run_nulled(scene):
    scene.db.execute(
        "UPDATE run_events SET seq = NULL, prev_hash = NULL, hash = NULL WHERE thread_id = 'r6'"
    )
    found = scene.problems(witness=False)
    assert has(found, "run r6, position 1: 3 event(s) without a place in the chain")


def test_newest_events_rewritten_inside_the_window_are_bounded_by_it(scene):
    """The documented limit: a run newer than the newest anchor can be rewritten unseen until
    the next anchor; verify says how large that window is, and fails once it outlives the
    anchor job's period."""
    scene.rewrite("r6", 3)
    inside = scene.check(witness=False)
    assert isinstance(inside, Verified) and (inside.window_events, inside.window_runs) == (3, 1)
    stale = scene.problems(witness=False, now=T0 + 350 + LIMIT + 1)
    assert has(stale, "3 event(s) no anchor covers")


def test_an_old_hmac_anchor_emptied_without_its_key(store, anchor_keys, monkeypatch, tmp_path):
    """Anchors from before Ed25519 keep verifying with the old key; without it, verify fails
    rather than passing them unchecked."""
    events(store.db, "r0", 4, T0)
    legacy = {
        "seq": 1,
        "at": T0 + 10,
        "last_event_id": 4,
        "heads": [["r0", 4, store.db.one("SELECT hash FROM run_events WHERE seq = 4")["hash"]]],
        "prev_mac": proof.GENESIS,
    }
    legacy["digest"] = proof.heads_digest(legacy["heads"])
    legacy["mac"] = proof.hmac_mac(OLD_KEY, legacy)
    store.db.execute(
        "INSERT INTO audit_anchors (seq, at, last_event_id, heads, digest, prev_mac, mac) "
        "VALUES (:seq, :at, :last_event_id, :heads, :digest, :prev_mac, :mac)",
        {**legacy, "heads": json.dumps(legacy["heads"])},
    )
    anchors.write(store.db, anchor_keys.signer, T0 + 20)
    both = anchor_keys.trust(hmac_key=OLD_KEY)
    assert isinstance(verify(store.db, both), Verified)
    store.db.execute(
        "UPDATE audit_anchors SET heads = '[]', digest = :d WHERE seq = 1",
        {"d": proof.heads_digest([])},
    )
    without = verify(store.db, anchor_keys.trust())
    assert isinstance(without, Break)
    assert str(without).startswith("anchor 1: its HMAC signature cannot be checked")
    assert "signature does not match" in str(verify(store.db, both))


def test_an_anchor_deleted_from_the_middle(scene):
    scene.anchor(T0 + 360)
    scene.db.execute("DELETE FROM audit_anchors WHERE seq = 2")
    found = scene.problems()
    assert has(found, "anchor 2: is missing (deleted; anchor 3 follows)")
    assert has(found, "anchor 2: is in the witness but not in the database (deleted)")


def test_a_truncated_witness(scene):
    lines = scene.witness.read_text().splitlines(keepends=True)
    scene.witness.write_text(lines[0])
    assert has(scene.problems(), "anchor 2: is not in the witness, which ends at anchor 1")
    scene.witness.write_text(lines[1])
    assert has(scene.problems(), "anchor 1: is missing from the witness, which starts at anchor 2")


def test_a_key_rotation_keeps_older_anchors_verifiable(scene, tmp_path):
    new = make_keys(tmp_path / "rotated", "anchor-2")
    scene.anchor(T0 + 390, new)
    result = scene.check(trust=scene.keys.trust(new))
    assert isinstance(result, Verified) and result.anchors == 3
    assert [a["kid"] for a in anchors.stored(scene.db)] == [scene.keys.signer.kid] * 2 + [
        new.signer.kid
    ]
    dropped = scene.problems(trust=new.trust())
    assert has(dropped, f"anchor 1: it is signed with key {scene.keys.signer.kid}, which is not")


def test_a_chain_re_signed_with_an_untrusted_key(scene, tmp_path):
    mallory = make_keys(tmp_path / "mallory")
    scene.rewrite("r0", 1)
    scene.db.execute("DELETE FROM audit_anchors")
    scene.witness.write_text("")
    scene.anchor(T0 + 100, mallory)
    scene.anchor(T0 + 300, mallory)
    found = scene.problems()
    assert has(found, f"anchor 1: it is signed with key {mallory.signer.kid}, which is not a")


def test_the_command_names_what_the_witness_shows(scene):
    scene.db.execute("DELETE FROM audit_anchors WHERE seq = 2")
    env = {**os.environ, **scene.keys.verifying_env()}
    done = zygote.run(
        [COMMAND, "audit", "verify", "--witness", str(scene.witness)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "anchor 2: is in the witness but not in the database (deleted)" in done.stdout
