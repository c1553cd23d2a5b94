"""Expand-then-contract: every migration only adds, unless it is a contract step listed with
its reason in ``store/contract.py``; a destructive statement anywhere else fails here, on both
backends' statements."""

from __future__ import annotations

import pytest

from store.contract import CONTRACT, destructive
from store.migrations import MIGRATIONS, pending


def _one(number: int, backend: str) -> list[str]:
    """The statements of migration ``number`` alone."""
    before = len(pending(number, backend))
    return pending(number - 1, backend)[: len(pending(number - 1, backend)) - before]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_only_listed_contract_steps_remove_anything(backend: str):
    found = {
        n: [s for s in _one(n, backend) if destructive(s)] for n in range(1, len(MIGRATIONS) + 1)
    }
    unmarked = {n: found[n] for n in found if found[n] and n not in CONTRACT}
    assert not unmarked, (
        "destructive statements outside a contract step (store/contract.py): ship the code that "
        f"stops using it first, then list the step with its reason: {unmarked}"
    )
    assert all(CONTRACT[n].strip() for n in CONTRACT)


@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE inbox_approvals",
        "ALTER TABLE runs DROP COLUMN owner",
        "ALTER TABLE runs RENAME TO runs_old",
        "ALTER TABLE runs RENAME COLUMN owner TO holder",
        "ALTER TABLE runs ALTER COLUMN attempts TYPE BIGINT",
        "ALTER TABLE runs ALTER COLUMN owner SET NOT NULL",
        "DELETE FROM runs WHERE status = 'done'",
        "TRUNCATE runs",
    ],
)
def test_the_check_catches_each_kind_of_destructive_statement(statement: str):
    assert destructive(statement)


@pytest.mark.parametrize(
    "statement",
    [
        "ALTER TABLE runs ADD COLUMN owner_note TEXT",
        "CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status)",
        "CREATE TABLE t (id TEXT PRIMARY KEY) -- DROP TABLE in a comment",
        "UPDATE runs SET ladder_step = 0 WHERE ladder_step IS NULL",
    ],
)
def test_an_additive_statement_passes(statement: str):
    assert not destructive(statement)
