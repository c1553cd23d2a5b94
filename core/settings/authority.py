"""The *Authority and audit* settings: the approval authority matrix, the JWT claim naming a
reviewer's groups, and the key that signs audit anchors. Declared through
:func:`core.settings._declare` like every other setting; kept in their own module for length.
"""

from __future__ import annotations

import os
from functools import lru_cache

from core.authority import Matrix, MatrixError, load_matrix
from core.proof import Signer, Trust
from core.settings import _declare
from core.settings.kinds import Invalid, Setting, duration, names, secret, text

AUTHORITY = "Authority and audit"

__all__ = [
    "AUTHORITY_FILE",
    "JWT_GROUPS_CLAIM",
    "AUDIT_ANCHOR_KEY",
    "AUDIT_ANCHOR_EVERY",
    "AUDIT_SIGNING_KEY_FILE",
    "AUDIT_PUBLIC_KEYS",
    "AUDIT_WITNESS_FILE",
]


@lru_cache(maxsize=8)
def _cached(path: str, mtime_ns: int, size: int) -> Matrix:
    return load_matrix(path)


def authority_file(raw: str) -> Matrix:
    """The matrix in the file, read again only when the file changes."""
    try:
        st = os.stat(raw)
        return _cached(raw, st.st_mtime_ns, st.st_size)
    except OSError as exc:
        raise Invalid(f"cannot be read: {exc.strerror}") from None
    except MatrixError as exc:
        raise Invalid(f"is invalid: {exc}") from None


def signing_key(raw: str) -> Signer:
    """The anchor job's private key, read and checked once, when the setting is first used."""
    try:
        with open(raw, "rb") as f:
            return Signer(f.read())
    except OSError as exc:
        raise Invalid(f"cannot be read: {exc.strerror}") from None
    except ValueError:
        raise Invalid("is not an unencrypted Ed25519 private key in PEM") from None


def public_keys(raw: str) -> Trust:
    """The trusted public keys, comma-separated PEM files (old ones kept after a rotation)."""
    pems = []
    for path in names(raw):
        try:
            with open(path, "rb") as f:
                pems.append(f.read())
        except OSError as exc:
            raise Invalid(f"{path} cannot be read: {exc.strerror}") from None
    try:
        return Trust(pems)
    except ValueError:
        raise Invalid("holds a file that is not a public key in PEM") from None


def anchor_key(raw: str) -> str:
    key = secret(raw)
    if len(key) < 32:
        raise Invalid("must be at least 32 characters (random, e.g. `openssl rand -hex 32`)")
    return key


AUTHORITY_FILE: Setting[Matrix | None] = _declare(
    "AUTHORITY_FILE",
    authority_file,
    None,
    AUTHORITY,
    "a TOML file of who may approve each workflow by amount band (docs/authority-and-audit.md); "
    "unset: anyone with the reviewer role",
    example="authority.toml",
)
JWT_GROUPS_CLAIM = _declare(
    "JWT_GROUPS_CLAIM",
    text,
    "groups",
    AUTHORITY,
    "the JWT claim listing the user's groups (a list of strings; anything else is refused)",
)
AUDIT_ANCHOR_KEY: Setting[str | None] = _declare(
    "AUDIT_ANCHOR_KEY",
    anchor_key,
    None,
    AUTHORITY,
    "the old HMAC key: checks anchors written before Ed25519, and signs JSONL exports",
    example="replace-with-32-or-more-random-characters",
    sensitive=True,
)
AUDIT_ANCHOR_EVERY = _declare(
    "AUDIT_ANCHOR_EVERY",
    duration,
    "1m",
    AUTHORITY,
    "how often `approval-worker audit anchor --loop` (or a sweep holding the signing key) "
    "signs an anchor over the audit trail; `audit verify` fails on events unanchored for "
    "twice this plus 5 minutes",
)
AUDIT_SIGNING_KEY_FILE: Setting[Signer | None] = _declare(
    "AUDIT_SIGNING_KEY_FILE",
    signing_key,
    None,
    AUTHORITY,
    "the Ed25519 private key (PEM) anchors are signed with: set it only where the anchor job "
    "runs, never on app or sweeper hosts (`approval-worker audit keygen` makes one)",
    example="/run/secrets/anchor.key",
)
AUDIT_PUBLIC_KEYS: Setting[Trust | None] = _declare(
    "AUDIT_PUBLIC_KEYS",
    public_keys,
    None,
    AUTHORITY,
    "the public keys (PEM files, comma-separated) `audit verify` trusts for anchors; keep a "
    "retired key listed so the anchors it signed still verify",
    example="keys/anchor-2026.pub,keys/anchor-2027.pub",
)
AUDIT_WITNESS_FILE = _declare(
    "AUDIT_WITNESS_FILE",
    text,
    None,
    AUTHORITY,
    "an append-only file outside the database the anchor job adds every anchor to; "
    "`audit verify --witness` compares the database with it",
    example="/var/lib/approval-worker/anchors.witness",
)
