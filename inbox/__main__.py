"""Reviewers' command line for the local inbox: list, show, approve, reject, edit, decide,
answer.

``approve`` and ``reject`` answer every proposed action the same way; ``decide`` answers each on
its own, with one decision per action in the order ``show`` lists them, e.g.
``decide ID --decisions '[{"type": "approve"}, {"type": "reject", "message": "duplicate"}]'``
(``null`` leaves an action for someone else). ``answer`` answers a plain ``interrupt()``'s
question: ``answer ID --value TEXT``, ``--json JSON``, ``--yes`` or ``--no``, with ``--action N``
(or ``--interrupt`` and LangGraph's interrupt id) when the request asks several; ``decide``'s
``--decisions`` may likewise be an object keyed by interrupt id.
"""

from __future__ import annotations

import argparse
import getpass
import json
import time
from typing import Any

from core.cli import cli_main
from core.errors import UserError
from core.hitl import ActionRequest, HitlRequest
from core.hitl_decisions import Answer, Approve, Edit, Reject
from core.limits import check_name
from core.logs import say
from inbox.addressed import by_interrupt, interrupt_positions, names_interrupts


def _age(since: float) -> str:
    seconds = int(max(0, time.time() - since))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="approval-worker inbox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="pending approval requests")
    deliver = sub.add_parser(
        "deliver", help="send what the outbox owes: webhooks, notifications, Slack, e-mail"
    )
    deliver.add_argument("--wait", action="store_true", help="retry until all are delivered")
    show = sub.add_parser("show", help="one request in full")
    show.add_argument("id")
    for name, text in (
        ("approve", "approve every proposed action"),
        ("reject", "reject every proposed action"),
        ("edit", "approve the action with edited arguments"),
        ("decide", "one decision per action (JSON), for mixed answers"),
        ("answer", "answer a question (a plain interrupt)"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("id")
        cmd.add_argument(
            "--by",
            default=None,
            help="reviewer name, self-asserted: one person, no separators (default: your user "
            "name)",
        )
        if name == "reject":
            cmd.add_argument("--reason", required=True, help="why, told to the agent")
        if name == "edit":
            cmd.add_argument("--args", required=True, help="the new arguments as a JSON object")
        if name == "answer":
            given = cmd.add_mutually_exclusive_group(required=True)
            given.add_argument("--value", help="the answer as text")
            given.add_argument("--json", help="the answer as JSON")
            given.add_argument("--yes", action="store_true", help="answer yes (true)")
            given.add_argument("--no", action="store_true", help="answer no (false)")
            which = cmd.add_mutually_exclusive_group()
            which.add_argument("--action", type=int, help="which question, as `show` numbers it")
            which.add_argument("--interrupt", help="which question, by its LangGraph interrupt id")
        if name == "decide":
            cmd.add_argument(
                "--decisions",
                required=True,
                help='JSON list, one per action: {"type": "approve"}, {"type": "reject", '
                '"message": ...}, {"type": "edit", "args": {...}} or {"type": "respond", '
                '"message": ...}',
            )
    return parser


def _json(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{flag} is not valid JSON ({exc.msg} at column {exc.colno})") from None


def _mixed(text: str, actions: tuple[ActionRequest, ...]) -> list[dict[str, Any] | None]:
    """``decide --decisions``: a list (or ``{"decisions": [...]}``); an edit may give just
    ``args``, and gets the action's own tool name (an edit cannot switch tools anyway). Left
    as JSON otherwise: the inbox's check names what is wrong with it."""
    value = _json(text, "--decisions")
    if isinstance(value, dict) and "decisions" in value:
        value = value["decisions"]
    elif names_interrupts(HitlRequest(actions), value):  # positions are the short form
        value = by_interrupt(HitlRequest(actions), value)
    if not isinstance(value, list) or not all(d is None or isinstance(d, dict) for d in value):
        raise UserError("--decisions must be a JSON list of objects, one per proposed action")
    decisions = []
    for decision, action in zip(value, actions, strict=False):
        if decision and decision.get("type") == "edit" and "edited_action" not in decision:
            decision = Edit(decision.get("args"), action.name).to_json()
        decisions.append(decision)
    return decisions + value[len(actions) :]


def _answer(
    args: argparse.Namespace, actions: tuple[ActionRequest, ...]
) -> list[dict[str, Any] | None]:
    """``answer``: the one question named (or the only one), the others left null."""
    asked = [i for i, a in enumerate(actions) if a.question is not None]
    if args.interrupt is not None:
        index = interrupt_positions(HitlRequest(actions)).get(args.interrupt, -1)
        if index < 0:
            raise UserError(f"no question with interrupt id {args.interrupt[:40]!r}; `show`")
    elif args.action is not None:
        index = args.action - 1
        if index not in asked:
            raise UserError(f"action {args.action} is not a question; `show` lists them")
    elif len(asked) == 1:
        index = asked[0]
    else:
        numbers = ", ".join(str(i + 1) for i in asked) or "none"
        raise UserError(f"name the question with --action N (questions: {numbers})")
    question = actions[index].question
    assert question is not None
    if args.yes or args.no:
        value: Any = bool(args.yes)
    elif args.json is not None:
        value = _json(args.json, "--json")
    else:
        value = question.from_text(args.value, f"answer {index + 1}")
    out: list[dict[str, Any] | None] = [None] * len(actions)
    out[index] = Answer(value).to_json()
    return out


def _decisions(args: argparse.Namespace, request: HitlRequest) -> list[dict[str, Any] | None]:
    actions = request.actions
    if args.command == "answer":
        return _answer(args, actions)
    if args.command in ("approve", "reject") and all(a.question for a in actions):
        raise UserError("this request asks questions: answer them with `answer ID --value ...`")
    if args.command == "approve":
        return [None if a.question else Approve().to_json() for a in actions]
    if args.command == "reject":
        reject = Reject(args.reason).to_json()
        return [None if a.question else reject for a in actions]
    if args.command == "decide":
        return _mixed(args.decisions, actions)
    edited = _json(args.args, "--args")
    if len(actions) != 1:
        raise UserError(
            f"request proposes {len(actions)} actions; edit needs exactly one "
            "(answer each with: decide ID --decisions JSON)"
        )
    return [Edit(edited, actions[0].name).to_json()]


@cli_main
def main() -> None:
    args = _parser().parse_args()

    from inbox.local import LocalInbox
    from inbox.outbox import Outbox
    from inbox.show import conversation_lines, request_lines
    from store.db import open_store
    from worker.cli import answer, delivery_line

    if args.command in ("approve", "reject", "edit", "decide", "answer"):
        # self-asserted: whoever runs this command on the host names themselves
        decided_by = check_name(args.by or getpass.getuser(), "--by")
        answer(args.id, lambda request: _decisions(args, request), decided_by, args.command)
        return
    with open_store() as store:
        inbox = LocalInbox(store.tables)
        if args.command == "list":
            pending = inbox.pending()
            for a in pending:
                flag = f"  [{a.ladder.upper()}]" if a.ladder else ""
                actions = a.request.summary()
                line = f"{a.id}  {a.external_id}  {actions}  ({_age(a.created_at)} old)"
                say(line + flag)
            if not pending:
                say("no pending approval requests")
            return
        if args.command == "deliver":
            from ops.channels import senders  # the entry point builds the process's senders

            outbox = Outbox(store.tables, senders=senders())
            while True:
                for d in outbox.deliver_due():
                    say(delivery_line(d), flush=True)
                if not args.wait or not outbox.undelivered():
                    return
                time.sleep(1)
        approval = inbox.get(args.id)
        if approval is None:
            raise UserError(
                f"no approval request with id {args.id!r}; "
                "`approval-worker inbox list` shows the pending ones"
            )
        say(
            f"{approval.title}\n  id: {approval.id}\n  for: {approval.external_id}"
            f"\n  status: {approval.status}"
        )
        say("\n".join(request_lines(store.tables.answers(), approval)))
        if approval.conversation:
            say("  conversation:")
            for line in conversation_lines(approval.conversation):
                say(f"    {line}")
        if approval.status == "pending" and approval.approvers:
            say(f"  approved so far by {approval.decided_by} (of {approval.quorum} needed)")
        if approval.answered:
            say(f"  decided by {approval.decided_by}: {json.dumps(approval.decisions)}")


if __name__ == "__main__":
    main()
