"""Recovery sweep (for cron): resume answered runs, take over runs of dead processes, expire
overdue approvals, retry failed runs; or list what waits, cancel a run, print its history."""

import argparse
import sys
import time

from store.cli import cli_main
from store.errors import UserError, one_line


@cli_main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--list", action="store_true", help="print the waiting runs and exit")
    parser.add_argument("--wait", action="store_true", help="sweep until nothing is unfinished")
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

    from agent.runner import open_runner, recovery_pass

    with open_runner() as runner:
        if args.list:
            now = time.time()
            rows = runner.runs.waiting_with_escalations()
            for row in rows:
                age = int(now - row["updated_at"])
                line = f"{row['thread_id']}  waiting on {row['interrupt_id']}  ({age}s)"
                if row.get("ladder_step"):
                    line += "  escalated (ladder)" if row["ladder_step"] >= 2 else "  reminded"
                if row["escalations"]:
                    times = f" x{row['escalations']}" if row["escalations"] > 1 else ""
                    line += f"  escalated{times} ({int(now - row['escalated_at'])}s ago)"
                print(line)
            if not rows:
                print("no waiting runs")
            return
        if args.history:
            from store.history import history, history_lines

            events = history(runner.store.db, args.history)
            if not events:
                raise UserError(f"no run {args.history!r}; check the thread id")
            print("\n".join(history_lines(events)))
            return
        if args.cancel:
            print(f"{args.cancel}  {runner.cancel(args.cancel, args.reason)}")
            return
        if args.retry:
            outcome = runner.retry(args.retry)
            print(f"{outcome.thread_id}  {outcome.line()}")
            return
        while True:
            try:
                for outcome in recovery_pass(runner, retry_failed=args.retry_failed):
                    print(f"{outcome.thread_id}  {outcome.line()}", flush=True)
                if not args.wait or not runner.runs.unfinished():
                    return
            except UserError:
                raise  # a setting to fix (bad key, bad URL): one line, exit 2
            except Exception as exc:  # noqa: BLE001 - database down: say so, keep sweeping
                if not args.wait:
                    print(
                        f"error: sweep failed: {one_line(exc)}",
                        file=sys.stderr,
                    )
                    sys.exit(1)
                print(f"sweep failed ({type(exc).__name__}); retrying", file=sys.stderr)
            time.sleep(args.interval)


if __name__ == "__main__":
    main()
