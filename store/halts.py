"""The stop button's state (``halts``): which workflows, tools or everything are halted, by whom
and why. Kept in the database so every process (app replicas, sweepers, resumers) sees a halt
at its next read and it survives restarts.

Each halt and unhalt is also an audit event on a chain of its own (``HALTS_CHAIN``), anchored
like a run's. A run a halt stops mid-resume is *parked*: its row keeps its status, its owner
names the halt (``halted:<scope>``) and its lease is pushed far out, so no sweep takes it over
while the halt holds; unhalting that scope gives the lease back (expired), and the next sweep
resumes it from its last checkpoint, where a receipt keeps a side effect already done from
happening twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from store.db import Database, Tx
from store.states import Event
from store.trail import append_event

HALTS_CHAIN = "audit:halts"  # the thread id of the halts' own audit chain
PARKED = "halted:"  # the owner prefix of a run a halt stopped
FOREVER = 4_000_000_000.0  # a lease no sweep outlives (2096)

GATE_SHARED = "SELECT pg_advisory_xact_lock_shared(35, 1)"
GATE_EXCLUSIVE = "SELECT pg_advisory_xact_lock(35, 1)"
ALL = "SELECT scope, reason, actor, at FROM halts ORDER BY at, scope"
UPSERT = """
INSERT INTO halts (scope, reason, actor, at) VALUES (:scope, :reason, :actor, :at)
ON CONFLICT (scope) DO UPDATE SET reason = :reason, actor = :actor, at = :at
"""
DELETE = "DELETE FROM halts WHERE scope = :scope"
WORKFLOW_OF = "SELECT workflow FROM runs WHERE thread_id = :thread_id"
# a node boundary's one read: the run's cancel intent and any halt of everything or its workflow
AT_BOUNDARY = """
SELECT r.cancel_reason, h.scope FROM runs r
LEFT JOIN halts h ON h.scope IN (:all_scope, :workflow_scope)
WHERE r.thread_id = :thread_id
"""
PARK = """
UPDATE runs SET owner = :parked, lease_until = :forever, updated_at = :now
WHERE thread_id = :thread_id AND owner = :owner AND status IN ('running', 'resuming')
"""
RELEASE = """
UPDATE runs SET lease_until = 0, updated_at = :now
WHERE owner = :parked AND status IN ('running', 'resuming')
"""


@dataclass(frozen=True)
class Halt:
    scope: str  # "all", "workflow:<name>" or "tool:<name>"
    reason: str
    actor: str
    at: float

    def __str__(self) -> str:
        what = "everything" if self.scope == "all" else self.scope.replace(":", " ", 1)
        return f"{what} halted by {self.actor}: {self.reason}"


class Halted(Exception):  # noqa: N818 - what it says: the run was halted
    """A halt stops this run here, before its next side effect."""

    def __init__(self, halt: Halt):
        super().__init__(str(halt))
        self.halt = halt


def scope_of(*, workflow: str | None = None, tool: str | None = None) -> str:
    if workflow:
        return f"workflow:{workflow}"
    if tool:
        return f"tool:{tool}"
    return "all"


def current(db: Database | Tx) -> list[Halt]:
    return [Halt(r["scope"], r["reason"], r["actor"], float(r["at"])) for r in db.all(ALL)]


def blocking(
    halts: list[Halt], workflow: str | None, tools: list[str] | tuple[str, ...] = ()
) -> Halt | None:
    """The halt that stops work on ``workflow`` touching ``tools`` (None: none does)."""
    scopes = {"all", *([f"workflow:{workflow}"] if workflow else []), *(f"tool:{t}" for t in tools)}
    return next((h for h in halts if h.scope in scopes), None)


def check(db: Database, workflow: str | None, tools: list[str] | tuple[str, ...] = ()) -> None:
    """Raise :class:`Halted` when a halt stops this work (one read of a table of a few rows)."""
    found = blocking(current(db), workflow, tools)
    if found is not None:
        raise Halted(found)


def check_effect(db: Database | Tx, thread_id: str, tool: str) -> None:
    """Before a side effect: raise :class:`Halted` when everything, the tool or the run's
    workflow is halted."""
    halts = current(db)
    if not halts:
        return
    row = db.one(WORKFLOW_OF, {"thread_id": thread_id})
    found = blocking(halts, row["workflow"] if row else None, [tool])
    if found is not None:
        raise Halted(found)


@contextmanager
def effect_gate(db: Database, thread_id: str, tool: str) -> Iterator[None]:
    """Around a side effect: :class:`Halted` first when a halt stops it. On Postgres the check
    and the effect hold a shared lock that :func:`halt` takes exclusively, so a halt returns
    only once no side effect that passed the check is still in flight, and every later one
    sees it. (SQLite, one host: the check alone.) Held on one pooled connection per effect."""
    if db.backend != "postgres":
        check_effect(db, thread_id, tool)
        yield
        return
    with db.transaction() as tx:
        tx.one(GATE_SHARED)
        check_effect(tx, thread_id, tool)
        yield


Within = Callable[[Tx, dict[str, Any]], None]  # the caller's writes in the same transaction


def halt(
    db: Database, scope: str, reason: str, actor: str, now: float, within: Within | None = None
) -> Halt:
    """Halt ``scope`` (again: the newer reason wins), audited with who and why; on Postgres it
    waits for the side effects in flight (``effect_gate``) before it returns. ``within`` gets
    the transaction and the event's detail (the notifications owed)."""
    with db.transaction() as tx:
        if tx.backend == "postgres":
            tx.one(GATE_EXCLUSIVE)
        tx.execute(UPSERT, {"scope": scope, "reason": reason, "actor": actor, "at": now})
        detail = {"scope": scope, "reason": reason}
        append_event(tx, HALTS_CHAIN, now, actor, Event.HALTED, detail)
        if within is not None:
            within(tx, {**detail, "by": actor, "at": now})
    return Halt(scope, reason, actor, now)


def unhalt(
    db: Database, scope: str, reason: str, actor: str, now: float, within: Within | None = None
) -> tuple[bool, int]:
    """Lift the halt on ``scope``, audited; give the runs it parked back to the sweep. Whether
    it was halted, and how many runs were released."""
    with db.transaction() as tx:
        was = tx.execute(DELETE, {"scope": scope}) == 1
        released = 0
        if was:
            released = tx.execute(RELEASE, {"parked": PARKED + scope, "now": now})
            detail: dict[str, Any] = {"scope": scope, "reason": reason, "released": released}
            append_event(tx, HALTS_CHAIN, now, actor, Event.UNHALTED, detail)
            if within is not None:
                within(tx, {**detail, "by": actor, "at": now})
    return was, released


def park(db: Database, thread_id: str, owner: str, halt: Halt, now: float) -> bool:
    """Stop a run this process owns where a halt found it, audited on the run."""
    with db.transaction() as tx:
        params = {
            "thread_id": thread_id,
            "owner": owner,
            "parked": PARKED + halt.scope,
            "forever": FOREVER,
            "now": now,
        }
        if tx.execute(PARK, params) != 1:
            return False
        detail = {"scope": halt.scope, "reason": halt.reason, "by": halt.actor}
        append_event(tx, thread_id, now, "worker", Event.HALT_STOPPED, detail)
    return True


class Halts:
    """The halts of one database, by operation (``store.tables.halts()``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def current(self) -> list[Halt]:
        return current(self._db)

    def holding(self, workflow: str | None, tools: list[str] | tuple[str, ...] = ()) -> Halt | None:
        """The halt that stops ``workflow`` (or one of ``tools``) now, if any."""
        return blocking(current(self._db), workflow, tools)

    def stop_at_boundary(self, thread_id: str, workflow: str) -> bool:
        """Whether a cancel intent or a halt stops this run before its next step: a segment
        asks at every node boundary, so it is one round trip, not one per kind of stop."""
        params = {
            "thread_id": thread_id,
            "all_scope": scope_of(),
            "workflow_scope": scope_of(workflow=workflow),
        }
        rows = self._db.all(AT_BOUNDARY, params)
        return any(r["cancel_reason"] is not None or r["scope"] is not None for r in rows)

    def park(self, thread_id: str, owner: str, halt: Halt, now: float) -> bool:
        return park(self._db, thread_id, owner, halt, now)

    def halt(
        self, scope: str, reason: str, actor: str, now: float, within: Within | None = None
    ) -> Halt:
        return halt(self._db, scope, reason, actor, now, within)

    def unhalt(
        self, scope: str, reason: str, actor: str, now: float, within: Within | None = None
    ) -> tuple[bool, int]:
        return unhalt(self._db, scope, reason, actor, now, within)
