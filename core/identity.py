"""Who someone is, as every rule sees them: a :class:`Principal` resolved from a credential that
is valid at the moment of the decision, and the one comparison of identities
(:func:`identity_key`), so that two names a person cannot tell apart are the same person to
separation of duties, the quorum, delegation, quotas and rate limits.

This module is the contract between the sources (which resolve principals) and the rule
pipeline (which judges them); it lives in ``core`` so every layer can name it.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from enum import StrEnum


class Provenance(StrEnum):
    """Which kind of credential vouched for a principal."""

    API_KEY = "api_key"
    JWT = "jwt"
    SESSION = "session"  # the web inbox's sign-in (made from an API key)
    SLACK = "slack"  # a Slack user linked to a product identity, proven from both sides
    EMAIL_LINK = "email_link"
    CLI = "cli"  # an operator at the machine's command line
    INBOX_WEBHOOK = "inbox_webhook"  # an inbox's signed event: vouches for the inbox, not a person
    INBOX_POLL = "inbox_poll"  # the sweep reading an inbox's answer


def identity_key(name: str) -> str:
    """The form in which identities are compared (never the raw string): the Unicode TR39
    confusable skeleton of the name after NFKC and case folding, from ``disarm``'s bundled
    ``confusables.txt`` (a maintained table, not ours). ``rіta`` (Cyrillic і) and ``rita`` share
    one key; lower-case ASCII is its own skeleton, so keys stored before this stay valid."""
    from disarm import skeleton_key  # 50 ms: only a process that compares people pays it

    return skeleton_key(unicodedata.normalize("NFKC", name).casefold())


def same_identity(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and identity_key(a) == identity_key(b)


def unclear(name: str) -> str | None:
    """Why ``name`` (NFKC-normalised) cannot identify a person, or None: a character that
    renders as nothing (invisible, default-ignorable, or blank like U+3164 and U+2800: its
    skeleton is empty), or a word mixing scripts with a look-alike of another script's letter
    (``аlice`` with a Cyrillic а). A single-script name in any script is fine.

    Printable ASCII is decided without ``disarm``, so a process that only checks such names
    (a Lambda answering a redelivered webhook) does not import it: every character but the
    space is visible and Latin or common, so only a blank name is unclear (the same answers,
    checked over every ASCII name of up to two characters in ``test_identity``)."""
    if name.isascii() and name.isprintable():
        return None if name.strip(" ") else "renders blank"
    import disarm

    for char in name:
        if char != " " and not disarm.skeleton_key(char):
            return f"holds U+{ord(char):04X}, which renders as nothing; type the name plainly"
    if not identity_key(name):
        return "renders blank"
    if disarm.is_mixed_script(name, per_word=True) and disarm.is_confusable(name):
        scripts = ", ".join(s.name.lower() for s in disarm.detect_scripts(name))
        return f"mixes scripts ({scripts}) with look-alike letters; one script per word"
    return None


@dataclass(frozen=True)
class Principal:
    """A person (or, for an inbox's webhook, the inbox) as of now.

    ``name``: the stable identity as the credential names it (display form); ``credential``:
    which credential vouched (``key:<id>``, ``jwt:<issuer>``, ``session:<id>``, ...), so a
    revocation can be traced; ``roles`` and ``groups`` as of the moment of resolution."""

    name: str
    roles: frozenset[str]
    credential: str
    provenance: Provenance
    groups: frozenset[str] = frozenset()
    expires_at: float | None = None

    @property
    def key(self) -> str:
        return identity_key(self.name)

    @property
    def via(self) -> str:
        return self.credential

    def has(self, *roles: str) -> bool:
        """Holds one of ``roles`` now (an admin holds all)."""
        return "admin" in self.roles or bool(self.roles & set(roles))

    def is_(self, name: str | None) -> bool:
        return same_identity(name, self.name)
