"""Start a run: one graph segment, then exit (it pauses for approval or finishes)."""

import argparse
import uuid

from store.cli import cli_main


@cli_main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("request", help='what the agent should do, e.g. "Refund order A-1001: ..."')
    parser.add_argument("--thread-id", help="choose the thread id (default: a new one)")
    parser.add_argument("--workflow", default="refund", help="workflow to run (default: refund)")
    args = parser.parse_args()

    from agent.runner import run_thread

    thread_id = args.thread_id or f"thread_{uuid.uuid4().hex[:8]}"
    print(run_thread(thread_id, args.request, workflow=args.workflow).line())


if __name__ == "__main__":
    main()
