"""Slack as a place to decide: button presses in, one decision path, the message updated.

``POST /slack/interactions`` takes what Slack sends when a reviewer presses Approve or Reject on
a request message (``ops/slack.py`` posts them). It trusts nothing it cannot verify: the
signature (Slack's scheme, a 5-minute window), a replay (the same signature once only), the
person (the Slack user linked to a reviewer from both sides, ``api.slack_links``, whose
credential is valid at the press; never the display name in the payload) and the request (the
digest the message showed, in the button).
The decision is answered at once (Slack wants 200 within 3 s); resuming the run and updating the
message happen after the answer. Every refusal is a 4xx in the one error shape and changes no
table, and the presser reads it in words too: an ephemeral message through the press's
``response_url`` (Slack itself shows only a generic error for a 4xx).

The acknowledgement never waits longer than ``SLACK_ACK_SECONDS`` for the database: a press that
is verified (signature, no database) but whose decision is still waiting then (a sweep holding
SQLite's write lock for seconds) is answered 200 ``acknowledged``, and its decision finishes
after; the presser reads its outcome, taken or refused, in an ephemeral message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from api.errors import ApiError, refused
from api.serverless import after_answer
from api.slack_links import WINDOW, off, verified, vouched
from core import settings
from core.faults import fault
from core.hitl_decisions import Approve, Reject, Verdict, read_answers
from core.settings.channels import slack_on
from worker.ballot import Decision, Pending, Source
from worker.refusals import Refusal, Refused
from worker.runner import Runner

log = logging.getLogger("api.slack")
router = APIRouter()
_LATE: set[asyncio.Future[Any]] = set()  # decisions and words still going after the answer
DECISIONS = {"approve": "approve", "reject": "reject"}


def _press(body: bytes) -> tuple[str, str, dict[str, Any]]:
    """(slack user id, decision, button value) of one Approve/Reject press."""
    try:
        payload = json.loads(parse_qs(body.decode())["payload"][0])
        user = payload["user"]["id"]
        action = payload["actions"][0]
        value = json.loads(action["value"])
        decision = DECISIONS[action["action_id"]]
        if not (isinstance(user, str) and isinstance(value, dict) and value.get("t")):
            raise ValueError("not a request button")
    except (KeyError, IndexError, TypeError, ValueError, UnicodeDecodeError):
        raise ApiError(422, "invalid", "not an Approve or Reject press on a request") from None
    return user, decision, value


def take(runner: Runner, body: bytes, headers: dict[str, str], background: BackgroundTasks) -> Any:
    """Verify, map the person, decide; what happens after the answer goes to ``background``."""
    if not slack_on():
        raise off()
    verified(body, headers)
    signature = headers.get("x-slack-signature", "")
    tables = runner.store.tables.slack()
    now = time.time()
    if tables.seen(signature, now):
        raise ApiError(409, "replayed", "this interaction was already taken")
    user, kind, value = _press(body)
    who = vouched(runner, tables.link_of(user), runner.clock())  # a revoked key ends it now
    run = runner.runs.get(str(value["t"]))
    count = len(run.asked.actions) if run else 1
    message = "rejected in Slack" if kind == "reject" else None
    item: Verdict = Reject(message) if kind == "reject" else Approve()
    decisions: list[Verdict | None] = [item] * max(count, 1)
    if kind == "approve" and value.get("p"):  # the message showed a reviewer's changes
        decisions = list(read_answers(_proposal(runner, value)))
    decision = Decision(
        thread_id=str(value["t"]),
        interrupt_id=str(value.get("i") or ""),
        decisions=decisions,
        approvers=[who.name],
        source=Source.SLACK,
        digest=value.get("d"),
    )
    result = runner.decide(decision)
    if isinstance(result, Refused):
        raise refused(result)
    # remembered once taken (a refused press changes no table); a replay racing this one was
    # refused by the path itself (already decided, or already approved by this reviewer)
    tables.first_sight(signature, float(headers["x-slack-request-timestamp"]) + WINDOW, now)
    if isinstance(result, Pending):  # the message redrawn by the path (``Runner.decide``)
        return result.answer(decision.thread_id)
    after_answer(background, runner, result.run)  # serverless; else handed off when claimed
    fault("decide.answer")
    return {"status": "accepted", "thread_id": result.run.thread_id}


def _proposal(runner: Runner, value: dict[str, Any]) -> list[dict[str, Any]]:
    """The decisions of the quorum's standing proposal the message showed, or 409 when it is
    no longer the one standing (a counter-proposal came since): nothing else is approved."""
    so_far = runner.approvals.list(str(value["t"]), str(value.get("i") or ""))
    if not so_far or so_far[0].fingerprint != value["p"]:
        raise refused(
            Refused(
                Refusal.STALE,
                "the proposal changed since this message was drawn: open the request again",
            )
        )
    return list(so_far[0].decisions)


def response_url(body: bytes) -> str | None:
    """Where Slack takes messages about this press (only read once the signature holds)."""
    try:
        url = json.loads(parse_qs(body.decode())["payload"][0]).get("response_url")
    except (KeyError, IndexError, TypeError, ValueError, UnicodeDecodeError, AttributeError):
        return None
    return url if isinstance(url, str) and url.startswith(("https://", "http://")) else None


def outcome_words(answer: Any) -> str:
    """What the presser reads when the decision finished after Slack had its answer."""
    status = answer.get("status") if isinstance(answer, dict) else None
    if status == "accepted":
        return "Your decision was recorded; the message will show the outcome."
    return "Your approval was recorded; the request waits for more approvals."


def tell(url: str | None, text: str) -> None:
    """An ephemeral message to the presser (only they see it); best effort, never raises."""
    if not url:
        return
    from inbox.outbox import http_client

    body = {"response_type": "ephemeral", "replace_original": False, "text": text}
    try:
        http_client().post(url, json=body)
    except Exception as exc:  # noqa: BLE001 - the decision stands whether or not Slack hears
        log.warning("slack: the presser was not told (%s)", type(exc).__name__)


def _later(work: Any) -> None:
    """Keep a task alive after the answer (the event loop holds only weak references)."""
    task = asyncio.ensure_future(work)
    _LATE.add(task)
    task.add_done_callback(_LATE.discard)


async def _finish(work: asyncio.Future[Any], late: BackgroundTasks, url: str | None) -> None:
    """A decision that outlived the acknowledgement: its follow-up work, then its words."""
    try:
        answer = await work
    except ApiError as exc:
        await run_in_threadpool(tell, url, f"Not taken: {exc.message}")
        return
    except Exception:  # noqa: BLE001 - logged; the presser is told the decision did not land
        log.warning("slack: a late decision failed", exc_info=True)
        await run_in_threadpool(tell, url, "Your decision could not be taken; press again.")
        return
    await late()  # serverless: the resume the answer would have carried
    await run_in_threadpool(tell, url, outcome_words(answer))


@router.post("/slack/interactions", tags=["channels"])
async def interactions(request: Request, background: BackgroundTasks) -> JSONResponse:
    """A signed Slack button press: 200 within ``SLACK_ACK_SECONDS`` (``acknowledged`` when the
    decision finishes after); 4xx in the one error shape otherwise."""
    body = await request.body()
    headers = {k.lower(): v for k, v in request.headers.items()}
    if not slack_on():
        raise off()
    verified(body, headers)  # no database: a forged press is refused before any wait
    runner: Runner = request.app.state.runner
    url = response_url(body)
    own = BackgroundTasks()  # the answer's, or run after the decision when that comes late
    work = asyncio.ensure_future(run_in_threadpool(take, runner, body, headers, own))
    done, _ = await asyncio.wait({work}, timeout=settings.SLACK_ACK_SECONDS.get())
    if not done:
        _later(_finish(work, own, url))
        return JSONResponse({"status": "acknowledged"}, status_code=200)
    try:
        answer = work.result()
    except ApiError as exc:
        _later(run_in_threadpool(tell, url, f"Not taken: {exc.message}"))
        raise
    background.tasks.extend(own.tasks)
    return JSONResponse(answer, status_code=200)
