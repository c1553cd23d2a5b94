"""Layout rules read off the source rather than trusted to review.

- ``store/`` owns every statement on the tables it creates, so adding a column is an edit there
  and not a search. Product code elsewhere calls ``store/`` functions; only the demo workflows
  (``agent/``, their own ledgers) and what is not product code (tests, bench, testkit, examples)
  may hold SQL.
- Packages import downward only, as the design page (docs/explanation/design.md) says.
- The worker is composed, not inherited: no class chain in ``worker/`` is deeper than two.
- No product file is over 400 lines: a longer one does more than one job.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Top-level folders that may hold SQL statement text.
MAY_HOLD_SQL = {"store", "agent", "tests", "bench", "testkit", "examples"}

# Statement shapes, in the upper case every statement here is written in (prose that happens to
# say "select ... from" does not count).
SQL = re.compile(
    r"""
      \bSELECT\b.+?\bFROM\b
    | \bSELECT\s+\d+\b
    | \bINSERT\s+INTO\b
    | \bUPDATE\s+\w+\s+SET\b
    | \bDELETE\s+FROM\b
    | \b(?:CREATE|DROP)\s+(?:UNIQUE\s+)?(?:TABLE|INDEX|VIEW)\b
    | \bALTER\s+TABLE\b
    | \bPRAGMA\s+\w
    | ^\s*VACUUM\s*$
    """,
    re.VERBOSE | re.DOTALL,
)


def product_files() -> Iterator[Path]:
    """Every ``.py`` file outside the folders that may hold SQL (new packages included)."""
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith((".", "__"))
            and d != "node_modules"
            and not (here == ROOT and d in MAY_HOLD_SQL)
        )
        yield from (here / f for f in sorted(files) if f.endswith(".py"))


def _text(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's with ``{}`` for each placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def sql_statements(path: Path) -> Iterator[tuple[int, str]]:
    """(line, first line of the statement) for each string literal that reads as SQL."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    inside_fstrings = {
        id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values
    }
    for node in ast.walk(tree):
        text = None if id(node) in inside_fstrings else _text(node)
        if text is not None and (found := SQL.search(text)):
            first = text[found.start() :].strip().splitlines()[0]
            yield getattr(node, "lineno", 0), first


def test_no_sql_statements_in_product_code_outside_store():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {first}"
        for path in product_files()
        for line, first in sql_statements(path)
    ]
    assert not found, "SQL outside store/ (move it into a store/ module):\n" + "\n".join(found)


def test_the_scan_covers_the_product_and_recognises_statements(tmp_path):
    scanned = {p.relative_to(ROOT).as_posix() for p in product_files()}
    for expected in ("run.py", "recover.py", "webhook.py", "lambda_handler.py"):
        assert expected in scanned
    for package in ("core", "inbox", "worker", "api", "ops"):
        assert any(p.startswith(f"{package}/") for p in scanned), package
    assert not any(p.split("/")[0] in MAY_HOLD_SQL for p in scanned)
    assert list(sql_statements(ROOT / "store" / "runs_sql.py"))  # the rule can fail at all

    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Every arrow is one conditional UPDATE; select the rows from the list."""\n'
        'A = "SELECT 1 AS ok"\n'
        'B = f"SELECT * FROM {table} WHERE id = :id"\n'
        'C = ("DELETE FROM runs "\n     "WHERE thread_id = :t")\n'
        'D = """\nUPDATE runs SET status = :s\n"""\n'
        'E = "PRAGMA page_count"\n'
        'F = "VACUUM"\n'
        'G = "ALTER TABLE runs ADD COLUMN x TEXT"\n'
    )
    assert sorted(line for line, _ in sql_statements(sample)) == [2, 3, 4, 6, 9, 10, 11]


# -- who imports whom ----------------------------------------------------------------------

# The design page's layers, bottom up: a package imports only packages of a lower rank. ``agent``
# (the demo workflows) sits beside ``api``: it plugs into the worker, which never imports it.
RANK = {
    "core": 0,
    "store": 1,
    "inbox": 2,
    "ops": 3,
    "worker": 4,
    "api": 5,
    "agent": 5,
    "approval_worker": 6,  # the installed command, over everything it dispatches to
}


def imports_of(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module.split(".")[0]


def test_packages_import_downward_only():
    wrong = []
    for package, rank in RANK.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            entry = path.name == "__main__.py"  # a command: it may call the worker
            for line, top in imports_of(path):
                if top not in RANK or top == package:
                    continue
                limit = RANK["worker"] if entry else rank - 1
                if RANK[top] > limit or (
                    top == "api" and package not in ("api", "approval_worker")
                ):
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {top}")
    assert not wrong, "\n".join(wrong)


def test_the_design_page_states_the_layers_the_test_checks():
    readme = (ROOT / "docs" / "explanation" / "design.md").read_text()
    claim = (
        "Layers import downward only: entry scripts and `api/` over `worker/`, `worker/` over "
        "`ops/`"
    )
    assert claim in " ".join(readme.split())
    for package in RANK:
        assert f"| `{package}/` |" in readme, package


def test_no_class_chain_in_the_worker_is_deeper_than_two():
    import importlib
    import inspect

    deep = []
    for path in sorted((ROOT / "worker").glob("*.py")):
        module = importlib.import_module(f"worker.{path.stem}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            ours = [c for c in cls.__mro__ if c.__module__.split(".")[0] in RANK]
            if len(ours) > 2:
                deep.append(f"worker.{path.stem}.{name}: {' -> '.join(c.__name__ for c in ours)}")
    assert not deep, "\n".join(deep)


PRODUCT = ("approval_worker", "core", "store", "inbox", "worker", "api", "ops", "agent")
LINE_CAP = 400  # a file longer than this does more than one job: split it by job


def test_no_product_file_is_over_the_line_cap():
    entry = [ROOT / name for name in ("run.py", "recover.py", "webhook.py", "lambda_handler.py")]
    files = entry + [p for name in PRODUCT for p in sorted((ROOT / name).rglob("*.py"))]
    assert len(files) > 100, "the scan should see the product's packages"
    over = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in files
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > LINE_CAP
    ]
    assert over == [], f"over {LINE_CAP} lines: {over}"
