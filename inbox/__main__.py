"""Reviewers' command line for the local inbox: list, show, approve, reject, edit."""

from __future__ import annotations

import argparse
import getpass
import json
import time

from store.cli import cli_main
from store.errors import UserError


def _age(since: float) -> str:
    seconds = int(max(0, time.time() - since))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _delivery_line(d) -> str:
    if d.ok:
        return f"delivered {d.message_id} to {d.url}"
    return f"delivery {d.message_id} to {d.url} failed ({d.detail}); it will be retried"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m inbox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="pending approval requests")
    deliver = sub.add_parser("deliver", help="send the signed webhooks still owed (WEBHOOK_URL)")
    deliver.add_argument("--wait", action="store_true", help="retry until all are delivered")
    show = sub.add_parser("show", help="one request in full")
    show.add_argument("id")
    for name, text in (
        ("approve", "approve every proposed action"),
        ("reject", "reject every proposed action"),
        ("edit", "approve the action with edited arguments"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("id")
        cmd.add_argument("--by", default=None, help="reviewer name (default: your user name)")
        if name == "reject":
            cmd.add_argument("--reason", required=True, help="why, told to the agent")
        if name == "edit":
            cmd.add_argument("--args", required=True, help="the new arguments as a JSON object")
    return parser


def _decisions(args, request: dict) -> list[dict]:
    actions = request["action_requests"]
    if args.command == "approve":
        return [{"type": "approve"} for _ in actions]
    if args.command == "reject":
        return [{"type": "reject", "message": args.reason} for _ in actions]
    try:
        edited = json.loads(args.args)
    except json.JSONDecodeError as exc:
        raise UserError(f"--args is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if len(actions) != 1:
        raise UserError(f"request proposes {len(actions)} actions; edit needs exactly one")
    return [{"type": "edit", "edited_action": {"name": actions[0]["name"], "args": edited}}]


@cli_main
def main() -> None:
    args = _parser().parse_args()

    from inbox.hitl import describe_action, summary
    from inbox.local import LocalInbox
    from inbox.outbox import Outbox
    from store.db import open_store

    with open_store() as store:
        inbox = LocalInbox(store.db)
        if args.command == "list":
            pending = inbox.pending()
            for a in pending:
                print(f"{a.id}  {a.external_id}  {summary(a.request)}  ({_age(a.created_at)} old)")
            if not pending:
                print("no pending approval requests")
            return
        outbox = Outbox(store.db)
        if args.command == "deliver":
            while True:
                for d in outbox.deliver_due():
                    print(_delivery_line(d), flush=True)
                if not args.wait or not outbox.undelivered():
                    return
                time.sleep(1)
        approval = inbox.get(args.id)
        if approval is None:
            raise UserError(
                f"no approval request with id {args.id!r}; "
                "`uv run python -m inbox list` shows the pending ones"
            )
        if args.command == "show":
            print(
                f"{approval.title}\n  id: {approval.id}\n  for: {approval.external_id}"
                f"\n  status: {approval.status}"
            )
            for i, action in enumerate(approval.request["action_requests"], 1):
                print(f"  action {i}: {describe_action(action)}")
            if approval.answered:
                print(f"  decided by {approval.decided_by}: {json.dumps(approval.decisions)}")
            return
        decided_by = args.by or getpass.getuser()
        answered = inbox.answer(args.id, _decisions(args, approval.request), decided_by)
        print(f"{args.command} recorded for {answered.id} by {decided_by}")
        for d in outbox.deliver_due():
            print(_delivery_line(d))


if __name__ == "__main__":
    main()
