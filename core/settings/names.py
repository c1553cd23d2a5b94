"""Which names are typos of a setting: a misspelt name is otherwise silently ignored, and
``DATABSE_URL`` then switches a deployment to a new empty SQLite file.

``.env`` belongs to this project, so every name in it must be a setting. The environment is
shared with the shell, the platform and other software, so only a name *close* to a setting is
refused there: one with a prefix only this project uses, the same letters but for underscores
and case, or a small edit distance (a letter missing, doubled, swapped or wrong).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

# Prefixes this project owns: an undeclared name with one is a typo however far it is
# (``REFUND_APROVAL_THRESHOLD=0`` would leave every refund without a reviewer). Prefixes
# other software shares (``AWS_``, ``ANTHROPIC_``, ``LOG_``, ``SLACK_``, ``SMTP_``) rely on the
# edit distance instead.
PREFIXES = (
    "APPROVAL_",
    "REFUND_",
    "PURCHASE_ORDER_",
    "VIGILATOR_",
    "WEBHOOK_",
    "DATABASE_",
    "SQLITE_",
    "LEASE_",
    "RETRY_",
    "RETAIN_",
    "NOTIFY_",
    "RESUME_",
    "SEPARATION_",
    "PRUNE_",
    "JWT_",
    "MAX_",
    "SESSION_",
    "AUDIT_",
    "RATE_LIMIT_",
    "EMAIL_",
)

# Names the platforms set beside ours, which a prefix above would otherwise flag: systemd's
# ``NOTIFY_SOCKET``, and Kubernetes' service links (``APPROVAL_WEBHOOK_SERVICE_HOST``, ...) for
# every Service in the namespace. A name with a lowercase letter (prometheus_client's legacy
# ``prometheus_multiproc_dir``) is another program's too: every setting is upper case.
_PLATFORM = re.compile(
    r"^(NOTIFY_SOCKET|.+_SERVICE_(HOST|PORT(_[A-Z0-9_]+)?)|.+_PORT_\d+_(TCP|UDP|SCTP)(_[A-Z]+)?)$"
)
_SERVICE_LINK_VALUE = re.compile(r"^(tcp|udp|sctp)://")


def distance(a: str, b: str, limit: int | None = None) -> int:
    """Edits (insert, delete, replace, swap two neighbours) from ``a`` to ``b``; with ``limit``,
    any count above it may be reported as ``limit + 1`` (every process start checks each
    variable of its environment against every setting: the full count would cost a cold start
    more than its imports)."""
    if limit is not None and abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        if limit is not None and min(row) > limit and min(prev) > limit:
            return limit + 1  # a swap reaches back two rows: both past the limit ends it
        prev2, prev = prev, row
    return prev[len(b)]


def _squash(name: str) -> str:
    return name.replace("_", "").upper()


class _Known:
    """The settings' names with what :func:`_near` compares, made once for every name."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = set(names)
        self.squashed = {k: _squash(k) for k in self.names}
        self.letters = {k: Counter(k) for k in self.names}
        self.alphabet = {k: frozenset(k) for k in self.names}


def _near(name: str, known: _Known) -> str | None:
    """The setting ``name`` is a typo of, not another program's variable: the nearest within
    one edit for short names and two for longer ones (underscores and case count as none)."""
    best: tuple[str, int] | None = None
    upper, mine = name.upper(), _squash(name)
    letters, alphabet = Counter(upper), frozenset(upper)
    for candidate, theirs in known.squashed.items():
        allowed = 1 if len(candidate) < 8 else 2
        if theirs == mine:
            d = 0
        elif abs(len(upper) - len(candidate)) > allowed:
            continue  # more edits than allowed, whatever the letters
        elif (
            len(alphabet - known.alphabet[candidate]) > allowed
            or len(known.alphabet[candidate] - alphabet) > allowed
        ):
            continue  # the same bound as the next, from distinct letters only: cheaper
        elif (
            max(_more(letters, known.letters[candidate]), _more(known.letters[candidate], letters))
            > allowed
        ):
            continue  # each letter one side has beyond the other's costs an edit
        else:
            d = distance(upper, candidate, limit=allowed)
        if d <= allowed and (best is None or d < best[1]):
            best = (candidate, d)
    return best[0] if best else None


def _more(a: Counter[str], b: Counter[str]) -> int:
    return sum((a - b).values())


def _likely(name: str, known: Iterable[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return close[0] if close else None


def typos(
    env: Mapping[str, str], dotenv: Iterable[str], known: Iterable[str]
) -> list[tuple[str, str, str | None]]:
    """``(name, where, suggestion)`` for each refused name: every unknown one in ``.env``, and
    the unknown ones in the environment that are close to a setting."""
    settings = _Known(known)
    known = settings.names
    found: list[tuple[str, str, str | None]] = []
    in_file = set(dotenv)
    for name in sorted(in_file - known):
        found.append((name, ".env", _near(name, settings) or _likely(name, known)))
    for name in sorted(set(env) - known - in_file):
        if name != name.upper() or _PLATFORM.match(name) or _SERVICE_LINK_VALUE.match(env[name]):
            continue
        near = _near(name, settings)
        if near:
            found.append((name, "the environment", near))
        elif name.startswith(PREFIXES):
            found.append((name, "the environment", _likely(name, known)))
    return found


def message(name: str, where: str, suggestion: str | None) -> str:
    """The one line that stops start-up."""
    if suggestion:
        return f"unknown setting {name}: did you mean {suggestion}? (set in {where})"
    return f"unknown setting {name} (set in {where}); every setting is in .env.example"
