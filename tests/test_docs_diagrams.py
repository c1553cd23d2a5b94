"""The run's state diagram in the docs is the code's state machine: a picture that drifts from the
code teaches the wrong thing, so the diagram is read as data here.

The Mermaid ``stateDiagram-v2`` in docs/explanation/design.md must name exactly the statuses of
``store.states.Status``, mark exactly the finished ones as ends, and label each arrow with the
``RunStore`` method that makes it. The methods that change a run's status are read from
store/runs.py (its syntax tree): a new one, or a new status, fails here until the diagram shows
it. Every arrow is then made on a real database, by the method it names, and the audit trail
must record exactly that move; the moves a method must not make (a row nobody owns, a finished
run cancelled) are tried and must be refused. The decision path's diagram must draw every
``Source`` a decision can come from.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import pytest
from conftest import ROOT

from core.hitl import HitlRequest
from store.runs import RunStore
from store.states import Run, Status

DESIGN = ROOT / "docs" / "explanation" / "design.md"
RUNS = ROOT / "store" / "runs.py"
START = "[*]"
PARAM = "parameter"  # a status the caller passes (the one it read, or the one it asks for)
SAME = "same as from"  # a move that keeps the status (a new owner takes the row over)


@dataclass(frozen=True)
class Arrow:
    source: str | None  # None: the run does not exist yet
    target: str
    method: str


def diagram() -> tuple[set[Arrow], set[str], set[str]]:
    """The arrows, the states and the states drawn as ends, of the docs' state diagram."""
    found = re.search(r"```mermaid\nstateDiagram-v2\n(.*?)```", DESIGN.read_text(), re.S)
    assert found, f"no ```mermaid stateDiagram-v2 block in {DESIGN.relative_to(ROOT)}"
    arrows: set[Arrow] = set()
    states: set[str] = set()
    ends: set[str] = set()
    for line in found.group(1).splitlines():
        line = line.strip()
        if not line or line.startswith("%%") or line.startswith("direction "):
            continue
        move = re.fullmatch(r"(\[\*\]|\w+) --> (\[\*\]|\w+)(?:\s*:\s*(.*))?", line)
        assert move, f"a line of the state diagram this test cannot read: {line!r}"
        source, target, label = move.groups()
        states |= {source, target} - {START}
        if target == START:
            assert not label, line
            ends.add(source)
            continue
        method = re.match(r"(\w+)\(\)", label or "")
        assert method, f"an arrow not labelled with the RunStore method making it: {line!r}"
        arrows.add(Arrow(None if source == START else source, target, method.group(1)))
    return arrows, states, ends


def _status(node: ast.expr, params: set[str]) -> str | None:
    if isinstance(node, ast.Constant) and node.value is None:
        return None
    if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "Status":
        return Status[node.attr].value
    if isinstance(node, ast.Name) and node.id in params:
        return PARAM
    raise AssertionError(f"store/runs.py: a status this test cannot read: {ast.unparse(node)}")


def code_transitions() -> dict[str, tuple[str | None, str]]:
    """Each public ``RunStore`` method that changes a run's status: (from, to), each a status,
    None (no row yet), PARAM or SAME. Read from the source, not from a list kept by hand."""
    tree = ast.parse(RUNS.read_text())
    store = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunStore")
    found: dict[str, tuple[str | None, str]] = {}
    for method in store.body:
        if not isinstance(method, ast.FunctionDef) or method.name.startswith("_"):
            continue
        params = {a.arg for a in method.args.args + method.args.kwonlyargs}
        for call in ast.walk(method):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
                continue
            if call.func.attr == "_end":  # (sql, thread_id, owner, from_status, to, reason)
                source_node, target_node = call.args[3], call.args[4]
            elif call.func.attr == "_transition":
                kw = {k.arg: k.value for k in call.keywords}
                source_node, target_node = kw["from_status"], kw["to_status"]
            else:
                continue
            target = _status(target_node, params)
            if target is None:
                continue  # an audit fact, not a move (a cancel intent, a reminder)
            same = ast.dump(source_node) == ast.dump(target_node) and target == PARAM
            found[method.name] = (_status(source_node, params), SAME if same else target)
    return found


def test_the_diagram_has_every_status_and_only_those():
    _, states, ends = diagram()
    assert states == {s.value for s in Status}, "update the state diagram in design.md"
    assert ends == {s.value for s in Status if s.finished}


def test_every_method_that_moves_a_run_is_drawn_as_the_code_makes_it():
    arrows, _, _ = diagram()
    code = code_transitions()
    assert code, "no transitions read from store/runs.py"
    drawn = {a.method for a in arrows}
    assert drawn == set(code), (
        f"drawn but not a transition: {drawn - set(code)}; not drawn: {set(code) - drawn}"
    )
    for name, (source, target) in code.items():
        mine = {a for a in arrows if a.method == name}
        for a in mine:
            assert source == PARAM or a.source == source, (name, a)
            if target == SAME:
                assert a.source == a.target, (name, a)
            else:
                assert target == PARAM or a.target == target, (name, a)


# -- every arrow made on a real database ---------------------------------------------------------

REQUEST = HitlRequest(())


class Rows:
    """Runs brought to each status by the real transitions, with the clock the tests move."""

    def __init__(self, store, clock):
        self.runs = RunStore(store.db, clock=clock)
        self.clock = clock
        self.n = 0

    def new(self) -> Run:
        self.n += 1
        run = self.runs.create(f"diagram_{self.n}", "refund", {"input": "x"}, "starter")
        assert run is not None
        return run

    def at(self, status: Status) -> Run:
        run = self.new()
        if status == Status.RUNNING:
            return run
        if status in (Status.DONE, Status.FAILED):
            end = self.runs.mark_done if status == Status.DONE else self.runs.mark_failed
            ended = end(run.thread_id, "starter", Status.RUNNING, "the end")
            assert ended is not None
            return ended
        run = self.wait(run)
        if status == Status.WAITING:
            return run
        if status == Status.RESUMING:
            return self.claim(run)
        if status == Status.CANCELLED:
            cancelled = self.runs.cancel_now(run.thread_id, Status.WAITING, "op", "why", "gone")
            assert cancelled is not None
            return cancelled
        assert status == Status.EXPIRED, f"no way to reach {status} here: add one to Rows.at"
        self.clock.now = (run.expires_at or 0) + 1
        expired = self.runs.expire(run.thread_id, run.interrupt_id or "", "sweep", "expired")
        assert expired is not None
        return expired

    def wait(self, run: Run) -> Run:
        waiting = self.runs.mark_waiting(
            run.thread_id,
            run.owner or "",
            run.status,
            f"interrupt-{run.thread_id}-{run.attempts}",
            [],
            REQUEST,
            shown=[],
            expires_at=self.clock() + 3600,
        )
        assert waiting is not None
        return waiting

    def claim(self, run: Run) -> Run:
        claimed = self.runs.claim(
            run.thread_id, run.interrupt_id or "", {"decisions": []}, "reviewer", decided=[]
        )
        assert claimed is not None
        return claimed

    def make(self, run: Run, method: str, target: str) -> Run | None:
        """``method`` called as its callers call it: with the status and owner they read."""
        tid, owner, status = run.thread_id, run.owner or "nobody", run.status
        r = self.runs
        if method == "mark_waiting":
            return r.mark_waiting(tid, owner, status, "i2", [], REQUEST, shown=[])
        if method == "claim":
            return r.claim(tid, run.interrupt_id or "", {"decisions": []}, "rev", decided=[])
        if method == "expire":
            self.clock.now = (run.expires_at or self.clock()) + 1
            return r.expire(tid, run.interrupt_id or "", "sweep", "expired")
        if method == "cancel_now":
            return r.cancel_now(tid, status, "operator", "why", "cancelled")
        if method in ("mark_done", "mark_failed", "mark_cancelled"):
            return getattr(r, method)(tid, owner, status, "the end")
        if method == "reclaim":
            self.clock.now = (run.lease_until or self.clock()) + 1
            return r.reclaim(tid, status, run.owner or "", "sweeper")
        if method == "retry":
            return r.retry(tid, run.attempts, target, "retrier")
        raise AssertionError(f"no way to make {method} here: add it to Rows.make")


def _last_move(runs: RunStore, thread_id: str) -> tuple[str | None, str]:
    moves = [e for e in runs.events(thread_id) if e.to_status is not None]
    return moves[-1].from_status, moves[-1].to_status


def test_every_arrow_is_a_move_the_code_makes(store, clock):
    arrows, _, _ = diagram()
    rows = Rows(store, clock)
    for a in sorted(arrows, key=lambda a: (a.source or "", a.target, a.method)):
        if a.source is None:
            assert a.method == "create"
            made: Run | None = rows.new()
        else:
            made = rows.make(rows.at(Status(a.source)), a.method, a.target)
        assert made is not None and made.status == a.target, a
        assert _last_move(rows.runs, made.thread_id) == (a.source, a.target), a


OWNED = ("mark_waiting", "mark_done", "mark_failed", "mark_cancelled", "reclaim")


@pytest.mark.parametrize("method", OWNED)
def test_a_runners_move_is_made_only_from_the_states_drawn(store, clock, method):
    """The runner's moves need the row's owner (and reclaim an expired lease): from any state
    the diagram does not draw for them, the same call changes nothing."""
    arrows, _, _ = diagram()
    drawn = {a.source for a in arrows if a.method == method}
    rows = Rows(store, clock)
    for status in Status:
        run = rows.at(status)
        made = rows.make(run, method, run.status)
        assert (made is not None) == (status.value in drawn), (method, status)


def test_only_the_states_drawn_cancel_at_once(store, clock):
    """A cancel ends a run at once only where the diagram draws ``cancel_now``; a running run
    gets an intent its runner honours (``mark_cancelled``), and a finished one is refused."""
    from worker.refusals import Refused
    from worker.runner import Runner

    arrows, _, _ = diagram()
    drawn = {a.source for a in arrows if a.method == "cancel_now"}
    rows = Rows(store, clock)
    runner = Runner(store, clock=clock)
    for status in Status:
        run = rows.at(status)
        try:
            runner.cancel(run.thread_id, "a test")
        except Refused:
            pass
        after = rows.runs.get(run.thread_id)
        assert after is not None
        cancelled_now = status != Status.CANCELLED and after.status == Status.CANCELLED
        assert cancelled_now == (status.value in drawn), status


def test_a_retry_goes_where_the_diagram_draws_it(store, clock):
    """Where a retry sends a failed run is the worker's choice (running, or resuming when a
    decision was claimed before it failed): each choice it makes is drawn, and only those."""
    from worker.runner import Runner

    arrows, _, _ = diagram()
    drawn = {(a.source, a.target) for a in arrows if a.method == "retry"}
    rows = Rows(store, clock)
    runner = Runner(store, clock=clock)
    before_claim = rows.at(Status.FAILED)
    claimed = rows.claim(rows.wait(rows.new()))
    after_claim = rows.runs.mark_failed(claimed.thread_id, claimed.owner or "", claimed.status, "x")
    assert after_claim is not None
    made = set()
    for run in (before_claim, after_claim):
        try:
            runner.retry(run.thread_id)
        except Exception:  # noqa: BLE001 - what the resume does after the move is not the subject
            pass
        retried = [e for e in rows.runs.events(run.thread_id) if e.reason == "retry"]
        assert len(retried) == 1, run.thread_id
        made.add((retried[0].from_status, retried[0].to_status))
    assert made == drawn


def test_the_decision_diagram_draws_every_source():
    """One decision's path starts from every source the code knows (``worker.ballot.Source``),
    each a node of the diagram's ``sources`` subgraph named by its value."""
    from worker.ballot import Source

    text = DESIGN.read_text()
    block = re.search(r"```mermaid\nflowchart TD\n(.*?)```", text, re.S)
    assert block, "no decision path diagram (```mermaid flowchart TD) in design.md"
    sources = re.search(r"^\s*subgraph sources\b.*?\n(.*?)^\s*end$", block.group(1), re.S | re.M)
    assert sources, "no `subgraph sources` in the decision path diagram"
    drawn = set(re.findall(r"^\s*(\w+)\[", sources.group(1), re.M))
    assert drawn == {s.value for s in Source}
