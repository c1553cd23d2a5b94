"""The audit trail's proof, checkable anywhere: event hashes, anchor signatures and the checks
that compare signed anchors with a trail. It imports only the standard library and
``cryptography``, because the evidence pack ships this very file as its offline verifier: the
worker and an auditor's laptop run the same code, so they cannot disagree.

Anchors are signed with Ed25519. The private key lives only where the anchor job runs; every
other host (and an auditor) holds public keys, each named by its key id (the first 16 hex digits
of SHA-256 over the raw public key), so several keys are trusted at once and a rotation keeps
older anchors verifiable. Anchors written before Ed25519 carry an HMAC (``alg`` empty); they are
checked with the old shared key when it is given and are otherwise a problem, never a pass.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

GENESIS = "0" * 64
GRACE = 300.0  # seconds: an anchor also covers runs changed this long before the one before it
ED25519 = "ed25519"
FIELDS = ("thread_id", "seq", "at", "actor", "from_status", "to_status", "reason", "detail")


def _canonical(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def sha256(value: Any) -> str:
    """SHA-256 over ``value`` as canonical JSON."""
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def event_hash(prev_hash: str, row: dict[str, Any]) -> str:
    """The hash of one event: over the previous hash and the event's content, canonical JSON
    (floats in their shortest exact form, so both backends hash the same)."""
    content = [row[f] for f in FIELDS]
    content[2] = float(content[2])
    text = json.dumps([prev_hash, *content], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def heads_digest(heads: list[list[Any]]) -> str:
    """SHA-256 over the heads ``[[thread_id, position, hash], ...]`` as canonical JSON."""
    text = json.dumps(heads, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def unchained_digest(rows: list[dict[str, Any]]) -> str:
    """What the genesis anchor records of a run's events from before the chain."""
    return sha256([[r["id"], *[r[f] for f in FIELDS if f != "seq"]] for r in rows])


def signed_text(anchor: dict[str, Any]) -> str:
    """What an anchor's signature covers. Ed25519 anchors: place, time, extent, the digests of
    heads, prune records and genesis, the key id and the predecessor's signature; legacy HMAC
    anchors: the first five of those, as they were signed."""
    if anchor.get("alg") != ED25519:
        fields = ("seq", "at", "last_event_id", "digest", "prev_mac")
        return json.dumps([anchor[f] for f in fields], separators=(",", ":"))
    body = [anchor[f] for f in ("seq", "at", "last_event_id", "digest", "prev_mac", "kid")]
    extra = [sha256(anchor.get("pruned") or []), sha256(anchor.get("genesis"))]
    return json.dumps(["approval-worker anchor v2", *body, *extra], separators=(",", ":"))


def hmac_mac(key: str, anchor: dict[str, Any]) -> str:
    return hmac.new(key.encode(), signed_text(anchor).encode(), hashlib.sha256).hexdigest()


def key_id(public_pem: bytes) -> str:
    """A public key's id: the first 16 hex digits of SHA-256 over its raw 32 bytes."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(public_pem)
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


class Signer:
    """The anchor job's private key (PEM, unencrypted Ed25519) and its key id."""

    def __init__(self, private_pem: bytes) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = serialization.load_pem_private_key(private_pem, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("not an Ed25519 private key")
        self._key = key
        self.public_pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.kid = key_id(self.public_pem)

    def sign(self, anchor: dict[str, Any]) -> str:
        return base64.b64encode(self._key.sign(signed_text(anchor).encode())).decode()

    @staticmethod
    def generate() -> bytes:
        """A new private key, PEM."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


@dataclass
class Trust:
    """The public keys an anchor may be signed with (PEM, by key id), and the legacy HMAC key
    for anchors written before Ed25519 (None: those cannot be checked)."""

    public_pems: list[bytes] = field(default_factory=list)
    hmac_key: str | None = None

    def __post_init__(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        self.keys: dict[str, Ed25519PublicKey] = {}
        for pem in self.public_pems:
            key = serialization.load_pem_public_key(pem)
            if not isinstance(key, Ed25519PublicKey):
                raise ValueError("not an Ed25519 public key")
            self.keys[key_id(pem)] = key

    @property
    def configured(self) -> bool:
        return bool(self.keys or self.hmac_key)

    def problem(self, anchor: dict[str, Any]) -> str | None:
        """Why ``anchor``'s signature does not check (None: it does)."""
        if anchor.get("alg") != ED25519:
            if self.hmac_key is None:
                return "its HMAC signature cannot be checked (set AUDIT_ANCHOR_KEY, the old key)"
            if hmac.compare_digest(anchor["mac"], hmac_mac(self.hmac_key, anchor)):
                return None
            return "its signature does not match (another key, or the anchor edited)"
        key = self.keys.get(anchor.get("kid") or "")
        if key is None:
            return f"it is signed with key {anchor.get('kid')}, which is not a trusted key"
        try:
            key.verify(base64.b64decode(anchor["mac"]), signed_text(anchor).encode())
        except Exception:  # noqa: BLE001 - InvalidSignature, or a mangled signature
            return "its signature does not match (the anchor edited)"
        return None


@dataclass(frozen=True)
class Problem:
    """What is wrong, the anchor it concerns (0: none) and the run and position (if one)."""

    anchor: int
    text: str
    thread_id: str | None = None
    position: int | None = None
    row: int | None = None  # the event's row id, where one is at fault

    def __str__(self) -> str:
        if self.thread_id:
            return f"run {self.thread_id}, position {self.position}: {self.text}"
        return f"anchor {self.anchor}: {self.text}"


def check_run(thread_id: str, rows: list[dict[str, Any]]) -> tuple[Problem | None, int]:
    """The first break in one run's rows (in the order written), and how many rows were
    written before the chain existed (only a prefix may be)."""
    prev, expected, legacy = GENESIS, 1, 0
    for index, row in enumerate(rows, start=1):
        if row["seq"] is None and row["hash"] is None and expected == 1:
            legacy += 1
            continue
        position = row["seq"] if isinstance(row["seq"], int) else index
        if row["seq"] != expected:
            text = (
                f"position {row['seq']} where {expected} was expected "
                "(a row deleted, inserted or reordered)"
            )
            return Problem(0, text, thread_id, expected, row.get("id")), legacy
        if row["prev_hash"] != prev:
            text = "does not link to the event before it"
            return Problem(0, text, thread_id, position, row.get("id")), legacy
        if row["hash"] != event_hash(prev, row):
            text = "content does not match its hash (edited)"
            return Problem(0, text, thread_id, position, row.get("id")), legacy
        prev, expected = row["hash"], expected + 1
    return None, legacy


def check_chain(anchors: list[dict[str, Any]], trust: Trust) -> Problem | None:
    """The anchors' own chain: consecutive, each linked to the one before, its contents
    matching their digests, each signature checked with ``trust``. ``anchors`` may start
    mid-chain (an export's): the first one's predecessor is then taken on trust."""
    prev: dict[str, Any] | None = None
    for anchor in anchors:
        if prev is not None and anchor["seq"] != prev["seq"] + 1:
            missing = prev["seq"] + 1
            return Problem(missing, f"is missing (deleted; anchor {anchor['seq']} follows)")
        if prev is not None and anchor["prev_mac"] != prev["mac"]:
            return Problem(anchor["seq"], "does not link to the anchor before it")
        if prev is None and anchor["seq"] == 1 and anchor["prev_mac"] != GENESIS:
            return Problem(anchor["seq"], "the first anchor links to another")
        if heads_digest(anchor["heads"]) != anchor["digest"]:
            return Problem(anchor["seq"], "its heads do not match its digest (edited)")
        problem = trust.problem(anchor)
        if problem is not None:
            return Problem(anchor["seq"], problem)
        prev = anchor
    return None


def signed_prunes(anchors: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The prune records anchors signed, by run."""
    return {
        p[0]: {"thread_id": p[0], "events": p[1], "head_hash": p[2], "anchor": a["seq"]}
        for a in anchors
        for p in a.get("pruned") or []
    }


def check_heads(
    anchors: list[dict[str, Any]],
    hashes: dict[tuple[str, int], str],
    pruned: dict[str, dict[str, Any]],
) -> list[Problem]:
    """Every anchored head against the trail as it is now (``hashes`` by run and position):
    unchanged, or its run pruned (a record an anchor signed) at or after that position. One
    problem per run, the first found."""
    found: dict[str, Problem] = {}
    for anchor in anchors:
        for thread_id, position, head in anchor["heads"]:
            now = hashes.get((thread_id, position))
            if now == head or thread_id in found:
                continue
            gone = pruned.get(thread_id)
            if now is None and gone is not None and int(gone["events"]) >= position:
                if int(gone["events"]) > position or gone["head_hash"] == head:
                    continue
            what = "is missing (deleted)" if now is None else "has another hash (rewritten)"
            text = f"anchored by anchor {anchor['seq']}, the event {what}"
            found[thread_id] = Problem(anchor["seq"], text, thread_id, position)
    return list(found.values())


def check_genesis(
    anchors: list[dict[str, Any]], unchained: dict[str, list[dict[str, Any]]]
) -> list[Problem]:
    """Events without a place in a chain are legitimate only as the genesis anchor (the
    first Ed25519 one) recorded them: any other was inserted "before the chain" later."""
    first = next((a for a in anchors if a.get("alg") == ED25519), None)
    if first is None:
        return []
    genesis = first.get("genesis")
    if genesis is None:
        return [Problem(first["seq"], "the first Ed25519 anchor carries no genesis record")]
    found = []
    for thread_id, rows in sorted(unchained.items()):
        if genesis.get(thread_id) != [len(rows), unchained_digest(rows)]:
            text = (
                f"{len(rows)} event(s) without a place in the chain that the genesis anchor "
                f"{first['seq']} did not record (inserted before the chain, or hashes removed)"
            )
            found.append(Problem(first["seq"], text, thread_id, 1))
    return found


def check_witness(stored: list[dict[str, Any]], witness: list[dict[str, Any]]) -> list[Problem]:
    """The database's anchors against the witness's copies: the witness whole from anchor 1,
    every witnessed anchor present and identical, and every stored anchor witnessed."""
    found = []
    if witness and witness[0]["seq"] != 1:
        text = f"is missing from the witness, which starts at anchor {witness[0]['seq']}"
        found.append(Problem(1, text))
    by_seq = {a["seq"]: a for a in stored}
    expected = witness[0]["seq"] if witness else 1
    for copy in witness:
        for lost in range(expected, copy["seq"]):
            found.append(Problem(lost, "is missing from the witness (a line removed)"))
        expected = copy["seq"] + 1
        mine = by_seq.get(copy["seq"])
        if mine is None:
            found.append(
                Problem(copy["seq"], "is in the witness but not in the database (deleted)")
            )
        elif _canonical(mine) != _canonical(copy):
            found.append(Problem(copy["seq"], "differs from the witness's copy (edited)"))
    last = expected - 1
    for anchor in stored:
        if anchor["seq"] > last:
            text = f"is not in the witness, which ends at anchor {last} (truncated?)"
            found.append(Problem(anchor["seq"], text))
    return found


def read_witness(lines: Iterable[str]) -> list[dict[str, Any]]:
    """A witness file's anchors, one JSON object a line (blank lines ignored)."""
    return [json.loads(line) for line in lines if line.strip()]


def witness_line(anchor: dict[str, Any]) -> str:
    return _canonical(anchor) + "\n"
