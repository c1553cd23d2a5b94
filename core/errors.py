"""The error type for problems a user can cause and fix, the one-line form of any error, and the
scrubbing that keeps secrets out of every message the worker writes."""

from __future__ import annotations

import re
from urllib.parse import unquote

# In a URL on its own, the password runs to its last @, whatever it holds (spaces, %, #, @).
_OWN_URL_PASSWORD = re.compile(r"^(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@]*:)(?P<pw>.*)@[^@]*$", re.I)
# In other text, a user:password@ part of any URL.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@]*:)(?P<pw>[^@\s/]*)@", re.I)
_PARAM_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'[^']*'|\"[^\"]*\"|[^\s&]+)", re.I)


class UserError(Exception):
    """A problem the user can fix (bad input, missing setting); its message says how.

    Entry points print it as one ``error: ...`` line and exit 2, never a traceback.
    """

    exit_code = 2


class Unreachable(UserError):
    """The database (or another service a command cannot do without) did not answer: nothing
    to fix in the command, so exit 1 (try again later), not 2."""

    exit_code = 1


def _secret_values() -> list[str]:
    """Every secret the process knows: sensitive settings, and the database password in each
    spelling it may be echoed in (raw, percent-decoded)."""
    from core.settings import SETTINGS

    found: list[str] = []
    for setting in SETTINGS:
        if not setting.sensitive:
            continue
        raw = setting.raw()
        if not raw:
            continue
        if "://" not in raw:  # a URL is kept readable; its password goes below
            found += raw.split() if setting.name.endswith("SECRET") else [raw.strip()]
        for match in (*_OWN_URL_PASSWORD.finditer(raw.strip()), *_PARAM_PASSWORD.finditer(raw)):
            password = match.group("pw").strip("'\"")
            found += [password, unquote(password)]
    return sorted({v for v in found if len(v) >= 4}, key=len, reverse=True)


_PUBLIC_PREFIXES = ("whsec_", "sk-ant-api03-", "sk-ant-", "aw_")
PIECE = 6  # the shortest run of a secret's characters that is masked wherever it appears


def _masked(text: str, values: list[str]) -> str:
    """``text`` with each secret masked in any case, and every run of ``PIECE`` or more of its
    characters too: a library may quote part of a value (libpq: a password up to a space),
    change its case, or cut it short."""
    pieces: set[str] = set()
    for value in values:
        text = re.sub(re.escape(value), "***", text, flags=re.IGNORECASE)
        folded = value.casefold()
        for prefix in _PUBLIC_PREFIXES:  # the same for everyone: not a piece of the secret
            folded = folded.removeprefix(prefix)
        pieces.update(folded[i : i + PIECE] for i in range(len(folded) - PIECE + 1))
    lowered = text.casefold()
    if not pieces or len(lowered) != len(text):  # casefold changed lengths: whole values only
        return text
    hidden = [False] * len(text)
    for i in range(len(lowered) - PIECE + 1):
        if lowered[i : i + PIECE] in pieces:
            hidden[i : i + PIECE] = [True] * PIECE
    if not any(hidden):
        return text
    out: list[str] = []
    for i, char in enumerate(text):
        if not hidden[i]:
            out.append(char)
        elif i == 0 or not hidden[i - 1]:
            out.append("***")
    return "".join(out)


def scrub(text: str) -> str:
    """``text`` without any secret: known values (and any piece of one, in any case) masked,
    URL and ``password=`` parts masked."""
    text = _masked(text, _secret_values())
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + "***@", text)
    return _PARAM_PASSWORD.sub(lambda m: m.group("head") + "***", text)


def one_line(exc: BaseException, limit: int = 500) -> str:
    """``Type: first line of the message``, scrubbed and cut to ``limit``: what runs, logs and
    outboxes keep."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return scrub(line)[:limit]
