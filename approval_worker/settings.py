"""``approval-worker settings``: the settings table, ``.env.example``, or a check of the
settings this process would start with."""

from __future__ import annotations

import argparse

from core.cli import cli_main
from core.logs import say
from core.settings import docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--env", action="store_true", help="print .env.example")
    which.add_argument(
        "--check",
        action="store_true",
        help="check the settings (.env and the environment) as every command does, then exit",
    )
    args = parser.parse_args(argv)
    if args.check:
        return _check()
    print(docs.env_example() if args.env else docs.markdown_table(), end="")
    return 0


@cli_main
def _check() -> int:
    say("settings ok")
    return 0
