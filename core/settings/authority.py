"""The *Authority and audit* settings: the approval authority matrix, the JWT claim naming a
reviewer's groups, and the key that signs audit anchors. Declared through
:func:`core.settings._declare` like every other setting; kept in their own module for length.
"""

from __future__ import annotations

import os
from functools import lru_cache

from core.authority import Matrix, MatrixError, load_matrix
from core.settings import _declare
from core.settings.kinds import Invalid, Setting, duration, secret, text

AUTHORITY = "Authority and audit"

__all__ = ["AUTHORITY_FILE", "JWT_GROUPS_CLAIM", "AUDIT_ANCHOR_KEY", "AUDIT_ANCHOR_EVERY"]


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
    "the HMAC key signing audit anchors, so an exported trail verifies without the database",
    example="replace-with-32-or-more-random-characters",
    sensitive=True,
)
AUDIT_ANCHOR_EVERY = _declare(
    "AUDIT_ANCHOR_EVERY",
    duration,
    "1h",
    AUTHORITY,
    "how often the sweep signs and stores an anchor over the audit trail's heads "
    "(with AUDIT_ANCHOR_KEY set)",
)
