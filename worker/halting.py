"""The stop button (EU AI Act Art. 14(4)(e)): ``approval-worker halt [--workflow W | --tool T |
--all] --reason R`` and ``approval-worker unhalt ...``, the admin API (``api.halts``) and the
operators' *Halts* page all call :func:`halt` and :func:`unhalt` here.

While a halt holds: no new run of the workflow (or any, for ``--all``) starts; a decision on a
pending request of the workflow, or proposing the tool, is refused ``halted`` (nothing written);
a run mid-resume stops at its next node boundary, or before its next side effect (the receipt
gate, ``store.receipts``), and is parked until the halt is lifted. ``unhalt`` gives parked runs
back to the sweep, which resumes each from its last checkpoint exactly once. The state lives in
the database (``store.halts``), so it holds across processes and restarts; every halt and unhalt
is an audit event with who and why.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from datetime import UTC, datetime
from typing import Any

from core.cli import cli_main
from core.errors import UserError
from core.limits import check_name, check_text
from core.logs import say
from inbox.outbox import FLUSHER
from ops import notify
from store import halts
from store.db import Store, Tx
from store.halts import Halt
from store.tables import Tables


class _Owed:
    """The halt's notifications: owed in its transaction, sent once it has committed."""

    def __init__(self, tables: Tables, kind: str) -> None:
        self.tables, self.kind, self.owed = tables, kind, False

    def __call__(self, tx: Tx, detail: dict[str, Any]) -> None:
        self.owed = notify.owe_halt(tx, self.kind, detail)

    def send(self) -> None:
        if self.owed:
            FLUSHER.kick(self.tables)


def _scope(workflow: str | None, tool: str | None, everything: bool) -> str:
    chosen = sum(bool(x) for x in (workflow, tool, everything))
    if chosen != 1:
        raise UserError("name exactly one of a workflow, a tool or everything (--all)")
    for value in (workflow, tool):
        if value:
            check_text(value, "the workflow or tool", 200)
    return halts.scope_of(workflow=workflow, tool=tool)


def _reason(reason: str) -> str:
    reason = check_text(reason.strip(), "the reason", 500)
    if not reason:
        raise UserError("say why (--reason): it is recorded in the audit trail")
    return reason


def halt(
    store: Store,
    actor: str,
    reason: str,
    *,
    workflow: str | None = None,
    tool: str | None = None,
    everything: bool = False,
    now: float | None = None,
) -> Halt:
    """Halt a workflow, a tool or everything, recorded with who and why."""
    scope = _scope(workflow, tool, everything)
    tables = store.tables
    owed = _Owed(tables, "halt.on")  # owed in the halt's transaction, sent once it commits
    at = time.time() if now is None else now
    made = tables.halts().halt(scope, _reason(reason), actor, at, owed)
    owed.send()
    return made


def unhalt(
    store: Store,
    actor: str,
    reason: str,
    *,
    workflow: str | None = None,
    tool: str | None = None,
    everything: bool = False,
    now: float | None = None,
) -> int:
    """Lift a halt; the number of parked runs given back to the sweep. Refused when that
    scope is not halted (nothing written)."""
    scope = _scope(workflow, tool, everything)
    why = _reason(reason)
    tables = store.tables
    owed = _Owed(tables, "halt.off")  # as in halt
    at = time.time() if now is None else now
    was, released = tables.halts().unhalt(scope, why, actor, at, owed)
    owed.send()
    if not was:
        raise UserError(f"{scope} is not halted (`approval-worker halt --list` shows the halts)")
    return released


def describe(found: list[Halt]) -> str:
    if not found:
        return "nothing is halted"
    return "\n".join(
        f"{h.scope}\tsince {datetime.fromtimestamp(h.at, UTC):%Y-%m-%d %H:%M:%S UTC}\t"
        f"by {h.actor}: {h.reason}"
        for h in found
    )


def _parser(lifting: bool) -> argparse.ArgumentParser:
    prog = sys.argv[0] if sys.argv[0].startswith("approval-worker") else "python -m worker.halting"
    what = "Lift a halt" if lifting else "Halt a workflow, a tool or everything (the stop button)"
    parser = argparse.ArgumentParser(prog=prog, description=what + "; recorded with who and why.")
    scope = parser.add_mutually_exclusive_group(required=not lifting)
    scope.add_argument("--workflow", help="one workflow (e.g. refund)")
    scope.add_argument("--tool", help="one tool, in every workflow (e.g. issue_refund)")
    scope.add_argument("--all", action="store_true", help="everything")
    if not lifting:
        scope.add_argument("--list", action="store_true", help="show what is halted, then exit")
    parser.add_argument("--reason", help="why (required; goes into the audit trail)")
    parser.add_argument("--by", help="who, as recorded (default: the operating-system user)")
    return parser


def _main(lifting: bool) -> None:
    args = _parser(lifting).parse_args()
    if lifting and not (args.workflow or args.tool or args.all):
        raise UserError("name what to unhalt: --workflow W, --tool T or --all")
    actor = check_name(args.by or getpass.getuser(), "--by")
    if not getattr(args, "list", False) and not args.reason:
        raise UserError("say why (--reason): it is recorded in the audit trail")

    from store.db import open_store

    with open_store() as store:
        if getattr(args, "list", False):
            say(describe(store.tables.halts().current()))
            return
        scope = {"workflow": args.workflow, "tool": args.tool, "everything": args.all}
        if lifting:
            released = unhalt(store, f"cli:{actor}", args.reason, **scope)
            say(f"unhalted; {released} stopped run(s) handed back to the sweep")
        else:
            made = halt(store, f"cli:{actor}", args.reason, **scope)
            say(f"halted: {made.scope} ({made.reason})")


@cli_main
def halt_main() -> None:
    _main(lifting=False)


@cli_main
def unhalt_main() -> None:
    _main(lifting=True)


if __name__ == "__main__":
    halt_main()
