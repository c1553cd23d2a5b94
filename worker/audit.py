"""``approval-worker audit``: ``verify`` checks the whole trail, its signed anchors and (with
``--witness``) the witness, and names every problem by run and position; ``anchor`` is the anchor
job, the one process that holds the Ed25519 private key; ``keygen`` makes a key pair;
``evidence`` writes an auditor's pack (``worker.evidence``); ``export`` and ``verify-export``
are the JSONL/CSV take-away (``worker.export``). ``python -m worker.audit ...`` is the same.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core import proof, settings
from core.cli import cli_main
from core.errors import UserError, one_line
from core.logs import say
from store.audit_trail import AuditTrail
from store.verify import Break, read_witness
from worker.export import csv_lines, jsonl, parse_moment, records, verify_export

log = logging.getLogger(__name__)

DESCRIPTION = """Check, anchor, export and hand over the audit trail. `verify [--witness FILE]
[--public-key PEM ...]`: every run's hash chain, the anchors' Ed25519 signatures with the trusted
public keys (AUDIT_PUBLIC_KEYS), the witness; exit 1 naming every problem. `anchor [--loop]`:
sign and store an anchor now (or every AUDIT_ANCHOR_EVERY) with AUDIT_SIGNING_KEY_FILE and add
it to AUDIT_WITNESS_FILE. `keygen --out DIR`: a new key pair. `evidence --from --to DIR`: an
auditor's pack with its own offline verifier. `export` / `verify-export`: every decision in a
period as JSONL or CSV, and a JSONL file's check."""


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def window_limit() -> float:
    """How old an unanchored event may be before ``verify`` calls it a problem."""
    return 2 * settings.AUDIT_ANCHOR_EVERY.get() + proof.GRACE


def trust(extra: list[str] | None = None) -> proof.Trust:
    """The trusted public keys (``--public-key`` files, else AUDIT_PUBLIC_KEYS) and the old
    HMAC key, for anchors from before Ed25519."""
    hmac_key = settings.AUDIT_ANCHOR_KEY.get()
    if extra:
        pems = []
        for path in extra:
            try:
                pems.append(Path(path).read_bytes())
            except OSError as exc:
                raise UserError(f"cannot read the public key {path}: {exc.strerror}") from None
        return proof.Trust(pems, hmac_key)
    configured = settings.AUDIT_PUBLIC_KEYS.get()
    return proof.Trust(configured.public_pems if configured else [], hmac_key)


def verify_report(
    trail: AuditTrail, witness: str | None = None, keys: list[str] | None = None
) -> tuple[bool, str]:
    """The trail checked: whether it verifies, and the lines that say so (with the unanchored
    window's size) or name every problem."""
    copies = None
    if witness is not None:
        try:
            copies = read_witness(witness)
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read the witness: {one_line(exc)}") from None
    trusted = trust(keys)
    result = trail.verify(trusted, witness=copies, now=time.time(), limit=window_limit())
    if isinstance(result, Break):
        problems = result.all
        lines = [f"audit trail broken: {problems[0]}"] + [f"  also: {p}" for p in problems[1:]]
        return False, "\n".join(lines)
    line = (
        f"audit trail verifies: {result.events} events in {result.runs} runs "
        f"({result.unchained} from before the chain; {result.pruned_runs} runs, "
        f"{result.pruned_events} events pruned by retention)"
    )
    if result.anchors and result.newest_anchor_at is not None:
        plural = "s" if result.anchors != 1 else ""
        seen = ", all in the witness" if result.witnessed else ", no witness compared"
        line += (
            f"; {result.anchors} signed anchor{plural}{seen}, the newest at "
            f"{_stamp(result.newest_anchor_at)}"
        )
    elif trusted.keys:
        line += "; no anchors yet"
    else:
        line += "; no anchors and no trusted keys: whoever can write the database can rewrite it"
    if result.window_events and result.oldest_unanchored_at is not None:
        age = max(0, int(time.time() - result.oldest_unanchored_at))
        line += (
            f"\nunanchored window: {result.window_events} events in {result.window_runs} runs, "
            f"the oldest {age} s old (no anchor covers them yet)"
        )
    else:
        line += "\nunanchored window: empty"
    return True, line


def append_witness(anchor: dict[str, Any]) -> None:
    """Add an anchor to the witness file (when one is set), after the anchor committed."""
    path = settings.AUDIT_WITNESS_FILE.get()
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, proof.witness_line(anchor).encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def anchor_now(
    trail: AuditTrail, signer: proof.Signer, now: float, every: float | None
) -> dict[str, Any] | None:
    """Sign and store an anchor (when due), then witness it."""
    anchor = trail.write_anchor(signer, now, every)
    if anchor is not None:
        append_witness(anchor)
    return anchor


def anchor_due(trail: AuditTrail, now: float) -> dict[str, Any] | None:
    """A sweep's step where the sweep holds the signing key (a single-host install): an anchor
    when the newest is ``AUDIT_ANCHOR_EVERY`` old. A failure waits for the next sweep."""
    try:
        signer = settings.AUDIT_SIGNING_KEY_FILE.get()
        if signer is None:
            return None
        return anchor_now(trail, signer, now, settings.AUDIT_ANCHOR_EVERY.get())
    except Exception as exc:  # noqa: BLE001 - the sweep's outcomes stand; the next one retries
        log.warning("audit anchor skipped: %s", one_line(exc))
        return None


def _signer() -> proof.Signer:
    signer = settings.AUDIT_SIGNING_KEY_FILE.get()
    if signer is None:
        raise UserError("set AUDIT_SIGNING_KEY_FILE (the anchor job's Ed25519 private key)")
    return signer


def keygen(out: str) -> str:
    """A new key pair in ``out``: ``anchor-<kid>.key`` (0600) and ``anchor-<kid>.pub``."""
    private = proof.Signer.generate()
    signer = proof.Signer(private)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    key_path = folder / f"anchor-{signer.kid}.key"
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    (folder / f"anchor-{signer.kid}.pub").write_bytes(signer.public_pem)
    return signer.kid


def _parser() -> argparse.ArgumentParser:
    prog = sys.argv[0] if sys.argv[0].startswith("approval-worker") else "python -m worker.audit"
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("verify", help="check chains, anchors and witness; exit 1 on problems")
    check.add_argument("--witness", help="the witness file to compare the anchors with")
    check.add_argument(
        "--public-key", action="append", help="a trusted public key (PEM); repeat for several"
    )
    anchor = sub.add_parser("anchor", help="sign and store an anchor (needs the private key)")
    anchor.add_argument("--loop", action="store_true", help="every AUDIT_ANCHOR_EVERY, forever")
    gen = sub.add_parser("keygen", help="a new Ed25519 key pair for the anchor job")
    gen.add_argument("--out", required=True, help="the folder to write the two files to")
    evidence = sub.add_parser("evidence", help="an auditor's pack of a period, with a verifier")
    evidence.add_argument("--from", dest="start", required=True, help="e.g. 2026-01-01 (UTC)")
    evidence.add_argument("--to", dest="end", required=True, help="exclusive, e.g. 2026-02-01")
    evidence.add_argument("out", help="the folder to write (must not exist or be empty)")
    export = sub.add_parser("export", help="every decision in a period, to standard output")
    export.add_argument("--from", dest="start", required=True, help="e.g. 2026-01-01 (UTC)")
    export.add_argument("--to", dest="end", required=True, help="exclusive, e.g. 2026-02-01")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    again = sub.add_parser("verify-export", help="check a JSONL export with AUDIT_ANCHOR_KEY")
    again.add_argument("file")
    return parser


@cli_main
def main() -> None:
    args = _parser().parse_args()
    if args.command == "keygen":
        kid = keygen(args.out)
        say(
            f"key {kid}: {args.out}/anchor-{kid}.key (private, for the anchor job only) and "
            f"{args.out}/anchor-{kid}.pub (add to AUDIT_PUBLIC_KEYS everywhere)"
        )
        return
    if args.command == "verify-export":
        key = settings.AUDIT_ANCHOR_KEY.get()
        if not key:
            raise UserError("set AUDIT_ANCHOR_KEY (the key exports are signed with)")
        with open(args.file, "rb") as f:
            problem = verify_export(f.read(), key, trust())
        if problem:
            say(f"export does not verify: {problem}")
            sys.exit(1)
        say("export verifies")
        return
    if args.command in ("export", "evidence"):  # checked before the database is opened
        start, end = parse_moment(args.start), parse_moment(args.end)
    signer = _signer() if args.command == "anchor" else None

    from store.db import open_store

    with open_store() as store:
        trail = store.tables.audit()
        if args.command == "verify":
            ok, text = verify_report(trail, args.witness, args.public_key)
            say(text)
            if not ok:
                sys.exit(1)
            return
        if signer is not None:
            _anchor(trail, signer, args.loop)
            return
        if args.command == "evidence":
            from worker.evidence import write_pack

            say(write_pack(trail, start, end, Path(args.out), trust()))
            return
        rows = records(trail, start, end)
        if args.format == "csv":
            lines = csv_lines(rows)
        else:
            period = trail.anchors_in_period(start, end)
            lines = jsonl(rows, settings.AUDIT_ANCHOR_KEY.get(), period)
        for line in lines:
            sys.stdout.write(line)


def _anchor(trail: AuditTrail, signer: proof.Signer, loop: bool) -> None:
    every = settings.AUDIT_ANCHOR_EVERY.get()
    while True:
        anchor = anchor_now(trail, signer, time.time(), every if loop else None)
        if anchor is not None:
            say(
                f"anchor {anchor['seq']} signed with key {signer.kid} over "
                f"{len(anchor['heads'])} run heads",
                flush=True,
            )
        if not loop:
            return
        time.sleep(min(every, 60.0))


if __name__ == "__main__":
    main()
