"""Start a run: one graph segment, then exit (it pauses for approval or finishes).

stdout gets exactly one line (the pause or the final answer), so scripts can read it; the
``thread: ...  model: ...`` line goes to stderr. Exit 0 when the run paused or finished, 1 when
it failed, 2 for bad input or settings (before anything is written).
"""

import argparse
import getpass
import sys
import uuid

from core.cli import cli_main


@cli_main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("request", help='what the agent should do, e.g. "Refund order A-1001: ..."')
    parser.add_argument("--thread-id", help="choose the thread id (default: a new one)")
    parser.add_argument(
        "--workflow",
        default="refund",
        help="refund (default), purchase-order, or a graph factory as package.module:function",
    )
    parser.add_argument(
        "--expires-in",
        help="how long reviewers have, e.g. 2h or 30m (default: the workflow's policy)",
    )
    parser.add_argument(
        "--requested-by",
        help="who asks for this (default: your user name); with SEPARATION_OF_DUTIES=1 they "
        "may not approve it",
    )
    args = parser.parse_args()

    from worker.cli import start

    return start(
        args.thread_id or f"thread_{uuid.uuid4().hex[:8]}",
        args.request,
        workflow=args.workflow,
        expires_in=args.expires_in,
        requested_by=args.requested_by or getpass.getuser(),
    )


if __name__ == "__main__":
    sys.exit(main())
