"""Signed-in browser sessions of the web inbox: a random id the cookie carries (stored only as
its digest, so a leaked table signs nobody in), who signed in, their roles and CSRF token."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from store.db import Database

_INSERT = """
INSERT INTO web_sessions (id_digest, principal, roles, groups, via, csrf, created_at, expires_at)
VALUES (:id_digest, :principal, :roles, :groups, :via, :csrf, :now, :expires_at)
"""
_GET = "SELECT * FROM web_sessions WHERE id_digest = :id_digest AND expires_at > :now"
_DELETE = "DELETE FROM web_sessions WHERE id_digest = :id_digest"
_PRUNE = "DELETE FROM web_sessions WHERE expires_at <= :now"
_KEY_LIVE = "SELECT 1 AS live FROM api_keys WHERE id = :id AND revoked_at IS NULL"


@dataclass(frozen=True)
class WebSession:
    principal: str
    roles: list[str]
    via: str  # "key:<id>" or "jwt"
    csrf: str
    expires_at: float
    groups: tuple[str, ...] = ()  # as the credential said at sign-in


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db, self.clock = db, clock

    def create(
        self,
        principal: str,
        roles: list[str],
        via: str,
        seconds: float,
        groups: tuple[str, ...] = (),
    ) -> tuple[str, WebSession]:
        """A new session: the id for the cookie (never stored) and the session."""
        now = self.clock()
        session_id = secrets.token_urlsafe(32)
        session = WebSession(
            principal,
            sorted(roles),
            via,
            secrets.token_urlsafe(32),
            now + seconds,
            tuple(sorted(groups)),
        )
        self.db.execute(_PRUNE, {"now": now})
        self.db.execute(
            _INSERT,
            {
                "id_digest": _digest(session_id),
                "principal": principal,
                "roles": json.dumps(session.roles),
                "groups": json.dumps(list(session.groups)),
                "via": via,
                "csrf": session.csrf,
                "now": now,
                "expires_at": session.expires_at,
            },
        )
        return session_id, session

    def get(self, session_id: str) -> WebSession | None:
        """The live session, or None (unknown, expired, or its API key was revoked since: the
        revocation deleted it, ``KeyStore.revoke``; a read never writes, so a refused request
        changes no table)."""
        row = self.db.one(_GET, {"id_digest": _digest(session_id), "now": self.clock()})
        if row is None:
            return None
        if row["via"].startswith("key:"):
            if self.db.one(_KEY_LIVE, {"id": row["via"][4:]}) is None:
                return None
        roles = json.loads(row["roles"])
        groups = tuple(json.loads(row.get("groups") or "[]"))
        return WebSession(
            row["principal"], roles, row["via"], row["csrf"], row["expires_at"], groups
        )

    def delete(self, session_id: str) -> None:
        self.db.execute(_DELETE, {"id_digest": _digest(session_id)})
