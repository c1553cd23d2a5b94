"""``approval-worker COMMAND [ARGS]``: the one installed command. Each command is the same
code as its entry script or module (``run.py``, ``recover.py``, ``python -m inbox``, ...), so
it works from any directory once installed (``uv sync``; in the image, on ``PATH``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from core import coldstart, version

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("approval_worker.commands:run", "start a run (pauses for approval or finishes)"),
    "recover": ("approval_worker.commands:recover", "the recovery sweep, list, cancel, retry"),
    "serve": ("approval_worker.commands:serve", "serve the HTTP app (webhooks, API, inbox)"),
    "inbox": ("inbox.__main__:main", "the local inbox: list, show, approve, reject, ..."),
    "keys": ("api.keys:main", "API keys: create, list, revoke"),
    "settings": ("approval_worker.settings:main", "print or check the settings"),
    "migrate": ("approval_worker.commands:migrate", "create or upgrade the tables, then exit"),
    "audit": ("worker.audit:main", "the audit trail: verify, anchor, keygen, evidence, export"),
    "halt": ("worker.halting:halt_main", "the stop button: halt a workflow, a tool or everything"),
    "unhalt": ("worker.halting:unhalt_main", "lift a halt; stopped runs resume"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return (
        "usage: approval-worker [--version] COMMAND [ARGS]\n\ncommands:\n"
        + "\n".join(lines)
        + "\n\n`approval-worker COMMAND --help` for a command's arguments. Exit codes: 0 ok, "
        "1 a run failed or the database could not be reached, 2 bad input or settings."
    )


def _target(spec: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if args[:1] == ["--version"]:
        print(f"approval-worker {version.current()}")
        return 0
    if not args or args[0] not in COMMANDS:
        got = f"unknown command {args[0]!r}" if args else "a command is needed"
        print(f"error: {got}\n{usage()}", file=sys.stderr)
        return 2
    name, rest = args[0], args[1:]
    sys.argv = [f"approval-worker {name}", *rest]  # what argparse shows as the program
    if name == "run":  # a process per run, as run.py
        coldstart.pause()
    result = _target(COMMANDS[name][0])()
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
