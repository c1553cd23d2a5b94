"""Recovery sweep (for cron): list waiting runs, resume the answered ones, or keep sweeping;
``--retry THREAD_ID`` continues one failed run from its last checkpoint."""

import argparse
import time

from store.cli import cli_main


@cli_main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--list", action="store_true", help="print the waiting runs and exit")
    parser.add_argument("--wait", action="store_true", help="sweep until nothing is waiting")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between sweeps")
    parser.add_argument("--retry", metavar="THREAD_ID", help="retry one failed run and exit")
    args = parser.parse_args()

    from agent.runner import open_runner, retry_thread

    if args.retry:
        print(f"{args.retry}  {retry_thread(args.retry).line()}")
        return

    with open_runner() as runner:
        if args.list:
            now = time.time()
            rows = runner.runs.waiting()
            for row in rows:
                age = int(now - row["updated_at"])
                print(f"{row['thread_id']}  waiting on {row['interrupt_id']}  ({age}s)")
            if not rows:
                print("no waiting runs")
            return
        while True:
            for outcome in runner.sweep():
                print(f"{outcome.thread_id}  {outcome.line()}", flush=True)
            if not args.wait or not runner.runs.waiting():
                return
            time.sleep(args.interval)


if __name__ == "__main__":
    main()
