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


def scrub(text: str) -> str:
    """``text`` without any secret: known values replaced, URL and ``password=`` parts masked."""
    for value in _secret_values():
        text = text.replace(value, "***")
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + "***@", text)
    return _PARAM_PASSWORD.sub(lambda m: m.group("head") + "***", text)


def one_line(exc: BaseException, limit: int = 500) -> str:
    """``Type: first line of the message``, scrubbed and cut to ``limit``: what runs, logs and
    outboxes keep."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return scrub(line)[:limit]
