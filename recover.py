"""Recovery sweep (cron, a systemd timer, or a service with --forever): resume answered runs,
take over runs of dead processes, expire overdue approvals, retry failed runs; or list what
waits, cancel a run, print its history.

Exit 0 when every run handled is done or paused, 1 when one failed (or a sweep could not run),
2 for bad input or settings.
"""

import argparse
import sys

from core.cli import cli_main
from core.errors import UserError


@cli_main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--list", action="store_true", help="print the waiting runs and exit")
    parser.add_argument("--wait", action="store_true", help="sweep until nothing is unfinished")
    parser.add_argument(
        "--forever",
        action="store_true",
        help="sweep every --interval seconds until stopped (run as a service)",
    )
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between sweeps")
    parser.add_argument("--retry", metavar="THREAD_ID", help="retry one failed run now")
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="also retry failed runs (bounded attempts, with backoff)",
    )
    parser.add_argument("--history", metavar="THREAD_ID", help="print one run's audit trail")
    parser.add_argument("--cancel", metavar="THREAD_ID", help="cancel one run")
    parser.add_argument("--reason", help="why (with --cancel), kept on the run")
    args = parser.parse_args()
    if args.reason and not args.cancel:
        raise UserError("--reason goes with --cancel THREAD_ID")
    if args.forever and args.wait:
        raise UserError("choose one of --wait (until nothing is unfinished) and --forever")
    if not 0 < args.interval <= 86400:
        raise UserError("--interval must be between 0 and 86400 seconds")

    from worker.cli import recover

    return recover(
        list_only=args.list,
        history=args.history,
        cancel=args.cancel,
        reason=args.reason,
        retry=args.retry,
        retry_failed=args.retry_failed,
        wait=args.wait,
        forever=args.forever,
        interval=args.interval,
    )


if __name__ == "__main__":
    sys.exit(main())
