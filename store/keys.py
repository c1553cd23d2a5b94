"""API keys: random, shown once, stored as a SHA-256 digest, named, with roles, revocable.

A key is ``aw_<id>_<secret>``: the id finds the row, the secret (32 random bytes) is compared by
its digest in constant time. A plain digest is enough for a 256-bit random secret (there is no
password to guess); the key itself is never stored or logged.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from core.errors import UserError
from core.identity import identity_key
from core.limits import check_name
from store.db import Database, Tx

PREFIX = "aw_"


class Role(StrEnum):
    REQUESTER = "requester"  # starts runs, reads their own
    REVIEWER = "reviewer"  # reads runs and decides
    OPERATOR = "operator"  # reads everything, cancels, retries, history
    ADMIN = "admin"  # manages keys (and may do everything else)


def parse_roles(values: list[str] | str) -> frozenset[Role]:
    names = values.split(",") if isinstance(values, str) else values
    roles = set()
    for name in (n.strip() for n in names):
        try:
            roles.add(Role(name))
        except ValueError:
            choices = ", ".join(r.value for r in Role)
            raise UserError(f"unknown role {name!r}; choose from: {choices}") from None
    if not roles:
        raise UserError("give at least one role")
    return frozenset(roles)


MAX_GROUPS = 50


def parse_groups(values: list[str] | tuple[str, ...] | str) -> frozenset[str]:
    """Groups named on a key (``finance``, ``support-leads``): short names without commas or
    spaces, so they read back from the stored comma-separated list exactly."""
    names = values.split(",") if isinstance(values, str) else list(values)
    groups = frozenset(n.strip() for n in names if n.strip())
    if len(groups) > MAX_GROUPS:
        raise UserError(f"a key holds at most {MAX_GROUPS} groups")
    for group in groups:
        if len(group) > 100 or not all(c.isalnum() or c in "-_.:/@" for c in group):
            raise UserError(f"group {group[:100]!r}: use 1 to 100 letters, digits or - _ . : / @")
    return groups


MAX_EMAIL = 254


def parse_email(value: str | None) -> str | None:
    """The address a key's approval e-mails go to (``bob@example.com``), or None: one plain
    address, no display name, nothing a mail header could be split on."""
    if value is None or not value.strip():
        return None
    address = value.strip()
    local, at, domain = address.rpartition("@")
    bad = set(' \t\r\n<>,;:"()[]\\')
    if (
        len(address) > MAX_EMAIL
        or not (local and at and domain)
        or "@" in local
        or any(c in bad or ord(c) < 32 for c in address)
        or domain.startswith(".")
        or domain.endswith(".")
    ):
        raise UserError(f"{address[:100]!r} is not an e-mail address like bob@example.com")
    return address


INSERT_KEY = """
INSERT INTO api_keys (id, name, identity, digest, roles, groups, email, created_at)
VALUES (:id, :name, :identity, :digest, :roles, :groups, :email, :now)
"""
MAILED_KEYS = """
SELECT * FROM api_keys WHERE email IS NOT NULL AND revoked_at IS NULL ORDER BY created_at, id
"""
# a person's keys by their identity (indexed); a key without one was made before migration 25
# by a release that did not write it, and is compared here by its name until filled
KEYS_OF = """
SELECT name, identity, groups, revoked_at FROM api_keys
WHERE identity = :identity OR identity IS NULL
"""
UNFILLED = "SELECT id, name FROM api_keys WHERE identity IS NULL"
FILL = "UPDATE api_keys SET identity = :identity WHERE id = :id AND identity IS NULL"
GET_KEY = "SELECT * FROM api_keys WHERE id = :id"
LIST_KEYS = "SELECT * FROM api_keys ORDER BY created_at, id"
REVOKE_KEY = """
UPDATE api_keys SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL RETURNING *
"""
# the browser sessions a key signed in end with it (``store.sessions`` also re-checks the key)
END_KEY_SESSIONS = "DELETE FROM web_sessions WHERE via = :via"


@dataclass(frozen=True)
class Key:
    id: str
    name: str
    roles: frozenset[Role]
    created_at: float
    revoked_at: float | None = None
    last_used_at: float | None = None
    groups: frozenset[str] = frozenset()
    email: str | None = None

    @property
    def reviews(self) -> bool:
        return bool(self.roles & {Role.REVIEWER, Role.ADMIN})

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Key:
        return cls(
            id=row["id"],
            name=row["name"],
            roles=parse_roles(row["roles"]),
            created_at=row["created_at"],
            revoked_at=row["revoked_at"],
            last_used_at=row.get("last_used_at"),
            groups=parse_groups(row.get("groups") or ""),
            email=row.get("email"),
        )

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "roles": sorted(self.roles),
            "groups": sorted(self.groups),
            "email": self.email,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "last_used_at": self.last_used_at,
        }


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split_token(token: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a well-formed key, else None."""
    if not token.startswith(PREFIX):
        return None
    key_id, _, secret = token[len(PREFIX) :].partition("_")
    if len(key_id) != 12 or not key_id.isalnum() or len(secret) < 32:
        return None
    return key_id, secret


def mailed_reviewers(reader: Database | Tx) -> list[Key]:
    """:meth:`KeyStore.mailed_reviewers`, read in a transaction too (the pause that mails)."""
    return [k for k in map(Key.from_row, reader.all(MAILED_KEYS)) if k.reviews]


def fill_identities(tx: Tx) -> None:
    """Give every key made before migration 25 its identity (``core.identity``): the TR39
    skeleton is not SQL, so the migration adds the column and this fills it, in the upgrade's
    transaction. Idempotent: a key a still-running older release makes meanwhile is filled by
    the next upgrade and matched by its name until then (``KEYS_OF``)."""
    for row in tx.all(UNFILLED):
        tx.execute(FILL, {"id": row["id"], "identity": identity_key(row["name"])})


class KeyStore:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db = db
        self.clock = clock

    def create(
        self,
        name: str,
        roles: frozenset[Role],
        groups: frozenset[str] = frozenset(),
        email: str | None = None,
    ) -> tuple[Key, str]:
        """A new key; the returned token is the only time the secret exists outside memory.
        ``email``: where its holder gets approval e-mails (a reviewer's key)."""
        name = check_name(name, "a key's name (whose key is it?)")
        email = parse_email(email)
        key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        now = self.clock()
        self.db.execute(
            INSERT_KEY,
            {
                "id": key_id,
                "name": name,
                "identity": identity_key(name),
                "digest": _digest(secret),
                "roles": ",".join(sorted(roles)),
                "groups": ",".join(sorted(groups)),
                "email": email,
                "now": now,
            },
        )
        key = Key(key_id, name, roles, now, groups=groups, email=email)
        return key, f"{PREFIX}{key_id}_{secret}"

    def get(self, key_id: str) -> Key | None:
        """The live key with this id (None: unknown or revoked); no secret is involved."""
        row = self.db.one(GET_KEY, {"id": key_id})
        return None if row is None or row["revoked_at"] is not None else Key.from_row(row)

    def mailed_reviewers(self) -> list[Key]:
        """Live keys that may decide and carry an e-mail address: who approval e-mails go to."""
        return mailed_reviewers(self.db)

    def _keys_of(self, name: str) -> list[dict[str, Any]]:
        """The rows of every key, live or revoked, whose holder is the person ``name`` names
        (compared as every rule compares people: by identity, never the raw string)."""
        wanted = identity_key(name)
        rows = self.db.all(KEYS_OF, {"identity": wanted})
        return [r for r in rows if (r["identity"] or identity_key(r["name"])) == wanted]

    def groups_of(self, name: str) -> frozenset[str]:
        """The groups of every live key of the person ``name`` names: how a source that names
        a person without authenticating them (the inbox CLI, a webhook, a polled inbox) learns
        what authority they hold. The one such lookup."""
        found: set[str] = set()
        for row in self._keys_of(name):
            if row["revoked_at"] is None:
                found |= parse_groups(row["groups"] or "")
        return frozenset(found)

    def revoked_only(self, name: str) -> bool:
        """Whether the person named had keys and every one of them is revoked: a source that
        names people without authenticating them (the inbox CLI, a webhook, a polled inbox)
        then speaks for someone whose power the product has ended. Someone who never had a key
        is not this (an inbox's own users): they simply hold no group."""
        theirs = self._keys_of(name)
        return bool(theirs) and all(r["revoked_at"] is not None for r in theirs)

    def verify(self, token: str) -> Key | None:
        """The live key ``token`` names, or None (unknown, wrong secret, revoked)."""
        parts = split_token(token)
        if parts is None:
            return None
        row = self.db.one(GET_KEY, {"id": parts[0]})
        # compare even when the row is missing, so timing says nothing about which ids exist
        stored = row["digest"] if row else _digest("")
        if not hmac.compare_digest(stored, _digest(parts[1])) or row is None:
            return None
        if row["revoked_at"] is not None:
            return None
        return Key.from_row(row)

    def list(self) -> list[Key]:
        return [Key.from_row(r) for r in self.db.all(LIST_KEYS)]

    def revoke(self, key_id: str) -> Key:
        with self.db.transaction() as tx:
            row = tx.returning(REVOKE_KEY, {"id": key_id, "now": self.clock()})
            if row is not None:
                tx.execute(END_KEY_SESSIONS, {"via": f"key:{key_id}"})
        if row is None:
            if self.db.one(GET_KEY, {"id": key_id}) is None:
                raise UserError(f"no key {key_id!r}; `python -m api.keys list` shows them")
            raise UserError(f"key {key_id} is already revoked")
        return Key.from_row(row)
