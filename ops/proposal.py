"""A quorum's standing proposal, told to the reviewers still to approve it, wherever they are.

When a reviewer approves with changes and the quorum is not met yet, the request the others
approve is no longer the agent's: its total may have moved into another authority band, with
other groups and more approvers. Every later approver must read that before deciding, so on
each approval still short of the quorum, from whichever source, Slack's message is redrawn with
the proposal's values, what changed, the approvals it now needs and buttons that approve
exactly it; and each reviewer who may approve the changed request (by its band) and has not
yet approved gets an e-mail saying the same, with the link to the request's page (the links of
the first e-mail approve the agent's proposal, which no longer stands).

Both are owed through the outbox like the rest of their channel, and only when the channel is
configured (``slack_on``, ``email_on``), so a deployment without them pays no read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from core.hitl import HitlRequest
from core.identity import identity_key
from core.settings.channels import email_on, slack_on
from inbox.outbox import FLUSHER
from inbox.views import as_decided, changed_fields
from ops.mail import Amount, flat, owe, recipients
from ops.shown import Views, views_of
from ops.slack import Slack, Standing
from store.db import Tx
from store.states import Run
from store.tables import Tables

log = logging.getLogger("ops.proposal")

Needs = Callable[[Run, HitlRequest], str | None]  # the decision path's reading: ``Runner.needs``


def standing(tables: Tables, run: Run, views: Views, needs: Needs) -> Standing | None:
    """The quorum's standing proposal when a reviewer changed what the agent proposed."""
    approvals = tables.approvals()
    so_far = approvals.list(run.thread_id, run.interrupt_id) if run.interrupt_id else []
    if not so_far or not any(d and d.get("type") == "edit" for d in so_far[0].decisions):
        return None
    first = so_far[0]
    request = as_decided(run.asked, {"decisions": first.decisions})
    before = views_of(run, views)
    after = views_of(replace(run, request=request, decision=None), views)
    changes = [
        change
        for old, new in zip(before, after, strict=False)
        for change in changed_fields(old, new)
    ]
    phrase = needs(run, request) or "one approver"
    return Standing(first.reviewer, after, changes, phrase, first.fingerprint, request)


def tell(
    tables: Tables,
    run: Run,
    approvers: Sequence[str],
    quorum: int,
    views: Views,
    needs: Needs,
    amount: Amount | None = None,
) -> None:
    """After an approval that leaves the quorum short: Slack's message and, for a changed
    proposal, the e-mails. A failure is logged: the approval is recorded either way."""
    if not (slack_on() or email_on()) or run.request is None:
        return
    try:
        proposal = standing(tables, run, views, needs)
        Slack(tables, views).progress(run, approvers, quorum, proposal)
        if proposal is not None and email_on():
            if mail(tables, run, proposal, approvers, amount):
                FLUSHER.kick(tables)
    except Exception as exc:  # noqa: BLE001 - telling must not undo a recorded approval
        log.warning("run %s: proposal not told (%s)", run.thread_id, type(exc).__name__)


def mail(
    tables: Tables, run: Run, proposal: Standing, approvers: Sequence[str], amount: Amount | None
) -> int:
    """Owe each reviewer of the changed request's band who has not approved it an e-mail, all
    in one transaction (the band's reviewers read in it)."""
    return tables.outbox().together(lambda tx: _mail(tx, run, proposal, approvers, amount))


def _mail(
    tx: Tx, run: Run, proposal: Standing, approvers: Sequence[str], amount: Amount | None
) -> int:
    changed = replace(run, request=proposal.request)
    done = {identity_key(a) for a in approvers}
    summary = flat("; ".join(v.summary for v in proposal.views) or run.workflow, 200)
    owed = 0
    for key in recipients(tx, changed, amount):
        if identity_key(key.name) in done:
            continue
        head, tail = _body(run, proposal, key.name, len(approvers))
        body: dict[str, Any] = {
            "key_id": key.id,
            "reviewer": key.name,
            "thread_id": run.thread_id,
            "interrupt_id": run.interrupt_id,
            "digest": run.request_digest,
            "expires_at": int(run.expires_at or 0),
            "actions": [],  # the page decides: the first e-mail's links are the agent's
            "subject": f"Changes proposed: {summary}"[:200],
            "head": head,
            "tail": tail,
        }
        owe(tx, run, key, body, f"{run.interrupt_id}|{key.id}|{proposal.fingerprint}")
        owed += 1
    return owed


def _body(run: Run, proposal: Standing, reviewer: str, so_far: int) -> tuple[str, str]:
    from core.moments import moment
    from ops.notify import inbox_link

    lines = [
        f"{reviewer}, {flat(proposal.by, 200)} approved a request with changes; it waits for "
        "your decision.",
        "",
        f"Proposed now: {flat('; '.join(v.summary for v in proposal.views), 1000)}",
        "",
        "Changed:",
        *(
            f"  {flat(label, 100)}: {flat(old)} -> {flat(new)}"
            for label, old, new in proposal.changes
        ),
        "",
        f"With these changes it needs {proposal.needs} ({so_far} so far); decide by "
        f"{moment(float(run.expires_at or 0))}.",
        "",
    ]
    tail = ["", f"Review the changes and decide in the web inbox: {inbox_link(run.interrupt_id)}"]
    return "\n".join(lines) + "\n", "\n".join(tail) + "\n"
