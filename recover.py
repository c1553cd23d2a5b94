"""Recovery sweep (for cron): list waiting runs, resume the answered ones, or keep sweeping."""

import argparse
import time

from store.cli import cli_main


@cli_main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--list", action="store_true", help="print the waiting runs and exit")
    parser.add_argument("--wait", action="store_true", help="sweep until nothing is waiting")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between sweeps")
    args = parser.parse_args()

    from agent.runner import open_runner

    with open_runner() as runner:
        if args.list:
            now = time.time()
            rows = runner.runs.waiting_with_escalations()
            for row in rows:
                age = int(now - row["updated_at"])
                line = f"{row['thread_id']}  waiting on {row['interrupt_id']}  ({age}s)"
                if row["escalations"]:
                    times = f" x{row['escalations']}" if row["escalations"] > 1 else ""
                    line += f"  escalated{times} ({int(now - row['escalated_at'])}s ago)"
                print(line)
            if not rows:
                print("no waiting runs")
            return
        while True:
            runner.flush_outbox()
            for outcome in runner.sweep():
                print(f"{outcome.thread_id}  {outcome.line()}", flush=True)
            if not args.wait or not runner.runs.waiting():
                return
            time.sleep(args.interval)


if __name__ == "__main__":
    main()
