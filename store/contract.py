"""Expand, then contract: a migration runs while the previous release's processes still serve
(a rolling deploy), so one that removes or rewrites what they read breaks them (migration 10
dropped ``inbox_approvals`` and the previous release's ``inbox list`` crashed). Such a step is a
*contract* step: it ships only a release after the code stopped using what it removes, and it is
listed here with why that holds; ``tests/test_migrations_expand.py`` fails on any destructive
statement in a migration not listed."""

from __future__ import annotations

import re

# migration number -> why the previous release no longer needs what it removes
CONTRACT: dict[int, str] = {
    10: "inbox_approvals: shipped (before this rule) in the same release as its replacement, "
    "run_approvals; the previous release's `inbox list` broke against it (issue 36): the "
    "case this rule exists for",
}

DESTRUCTIVE = re.compile(
    r"\b(DROP\s+(TABLE|COLUMN|VIEW|TYPE|SCHEMA)|ALTER\s+TABLE\s+\S+\s+RENAME|RENAME\s+COLUMN"
    r"|ALTER\s+COLUMN\s+\S+\s+(SET\s+DATA\s+)?TYPE|SET\s+NOT\s+NULL|TRUNCATE|DELETE\s+FROM)\b",
    re.IGNORECASE,
)


def destructive(statement: str) -> bool:
    """Whether ``statement`` removes or rewrites what an older process may read."""
    without_comments = re.sub(r"--[^\n]*", "", statement)
    return DESTRUCTIVE.search(without_comments) is not None
