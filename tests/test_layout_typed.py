"""Typed-end-to-end rules read off the source (issue 32), so they hold after review forgets them.

- A workflow is called, never probed: :class:`worker.workflows.Workflow` names every member and
  :class:`worker.workflows.WorkflowBase` gives the optional ones defaults, so no product module
  asks ``getattr(flow, "describe", None)``; a probe that comes back fails here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from worker.workflows import Workflow, WorkflowBase

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("approval_worker", "core", "store", "inbox", "worker", "api", "ops", "agent")


def product_sources() -> Iterator[tuple[Path, ast.AST]]:
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path, ast.parse(path.read_text(), str(path))
    for entry in ("run.py", "recover.py", "webhook.py", "lambda_handler.py"):
        path = ROOT / entry
        yield path, ast.parse(path.read_text(), str(path))


def workflow_members() -> set[str]:
    """Every member the protocol declares (required and optional alike)."""
    declared = {n for n in vars(Workflow) if not n.startswith("_")}
    return declared | {n for n in vars(WorkflowBase) if not n.startswith("_")}


def probes(tree: ast.AST, members: set[str]) -> Iterator[tuple[int, str]]:
    """``getattr(x, "member", ...)`` / ``hasattr(x, "member")`` for a workflow member."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in members
        ):
            yield node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"


def test_no_product_module_probes_a_workflow_for_a_member():
    members = workflow_members()
    found = [
        f"{path.relative_to(ROOT)}:{line} {call}"
        for path, tree in product_sources()
        for line, call in probes(tree, members)
    ]
    assert not found, "call the member (WorkflowBase has its default):\n" + "\n".join(found)


def test_the_probe_scan_recognises_a_probe_and_knows_the_optional_members():
    members = workflow_members()
    assert {"describe", "check_edit", "derive", "charges", "resume_each"} <= members
    tree = ast.parse('d = getattr(flow, "describe", None)\nok = getattr(graph, "nodes", {})')
    assert [line for line, _ in probes(tree, members)] == [1]


def test_a_workflow_that_offers_nothing_optional_has_every_default():
    class Bare(WorkflowBase):
        name = "bare"

    bare = Bare()
    assert bare.describe is not None and bare.derive("t", {"a": 1}) == {"a": 1}
    assert bare.derived_arguments() == {} and bare.argument_choices("t") == {}
    assert bare.amount(None) is None  # type: ignore[arg-type]
    assert not bare.asynchronous and not bare.resume_each
    with bare.reading_many():
        pass


def test_an_audit_event_is_parsed_from_any_selection_of_its_columns():
    """The queue reads only ``thread_id, detail``; the history the whole row."""
    from store.event_rows import AuditEvent

    part = AuditEvent.from_row({"thread_id": "t", "detail": '{"tool": "issue_refund"}'})
    assert part.facts == {"tool": "issue_refund"} and part.at == 0.0
    whole = AuditEvent.from_row({"at": 5, "actor": "a", "reason": "r", "detail": None})
    assert (whole.at, whole.detail, whole.facts) == (5.0, None, {})
    assert AuditEvent.from_row({"at": 1, "detail": "[1]"}).facts == {}
