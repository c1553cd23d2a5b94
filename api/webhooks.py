"""Turning a signed inbox delivery into at most one claimed resume.

Only a verified, well-formed ``interrupt.answered`` for the interrupt a run waits on claims it;
everything else that is verified is acknowledged with 2xx (Svix retries any other status for a
day), so redeliveries, late answers and foreign events are harmless.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from api.errors import ApiError, error_body
from api.serverless import answer_claimed
from core import settings
from core.errors import UserError
from inbox import thread_id_from
from inbox.events import AnsweredData, InvalidEvent, answered_by_position, approvers, parse_event
from store.db import Tx
from store.runs import Within
from store.states import NOTHING_ASKED, Event, Run
from worker.decisions import Applied, Decision, Source
from worker.refusals import Refusal, Refused
from worker.runner import Runner

NEW_SECRET = (
    'python -c "import base64, secrets; '
    "print('whsec_' + base64.b64encode(secrets.token_bytes(32)).decode())\""
)

router = APIRouter()


@dataclass
class Reply:
    status_code: int
    body: dict[str, Any]
    resume: Run | None = field(default=None)  # the claimed row, to resume after the reply
    remembered: bool = False  # the delivery id was committed with the claim


# Svix's header names and the Standard Webhooks names its signature scheme is defined with.
SVIX_HEADERS = {
    "svix-id": "webhook-id",
    "svix-timestamp": "webhook-timestamp",
    "svix-signature": "webhook-signature",
}


class SvixVerifier:
    """The check ``svix.webhooks.Webhook.verify`` makes, done with ``standardwebhooks``, which
    svix wraps: importing ``svix.webhooks`` loads svix's whole API client, which cost
    ``import webhook`` about 0.4 s of its cold start (``bench/RESULTS.md``), for a header
    rename. Same secret format, same errors, same ±5 minute tolerance. Several secrets (while
    rotating) are tried in turn, as are several signatures in one header.
    """

    def __init__(self, secrets: tuple[str, ...]):
        from standardwebhooks.webhooks import Webhook

        self._inner = [Webhook(secret) for secret in secrets]

    def verify(self, body: bytes | str, headers: dict[str, str]) -> None:
        from standardwebhooks.exceptions import WebhookVerificationError

        lowered = {k.lower(): v for k, v in headers.items()}
        for svix_name, standard_name in SVIX_HEADERS.items():
            lowered[standard_name] = lowered.get(svix_name, lowered.get(standard_name, ""))
        for i, webhook in enumerate(self._inner):
            try:
                webhook.verify(body, lowered, json_parse=False)
                return
            except WebhookVerificationError:
                if i == len(self._inner) - 1:
                    raise


def webhook_verifiers() -> dict[str, SvixVerifier]:
    """A verifier per configured source, each with its own secrets (checked at start-up: 24+
    bytes, whsec_ base64); at least one source must be configured."""
    local, vigilator = settings.WEBHOOK_SECRET.get(), settings.VIGILATOR_WEBHOOK_SECRET.get()
    if not local and not vigilator:
        raise UserError(
            "WEBHOOK_SECRET (local inbox) or VIGILATOR_WEBHOOK_SECRET (Vigilator) is not set; "
            f"make one with: {NEW_SECRET}"
        )
    if local and vigilator and set(local) & set(vigilator):
        raise UserError(
            "WEBHOOK_SECRET and VIGILATOR_WEBHOOK_SECRET share a secret; give each source its own"
        )
    verifiers = {}
    if local:
        verifiers["local"] = SvixVerifier(local)
    if vigilator:
        verifiers["vigilator"] = SvixVerifier(vigilator)
    return verifiers


def verify(verifier: SvixVerifier, body: bytes, headers: dict[str, str]) -> str | None:
    """None if the signature holds, else a short reason (never the secret or the signature)."""
    from standardwebhooks.exceptions import WebhookVerificationError

    try:
        verifier.verify(body, headers)
    except WebhookVerificationError as exc:
        return str(exc) or "signature verification failed"
    except UnicodeDecodeError:
        return "body is not UTF-8"
    except ValueError:  # malformed signature header (no comma, bad base64)
        return "malformed signature header"
    return None


def receive(
    runner: Runner, verifier: SvixVerifier, source: str, body: bytes, headers: dict[str, str]
) -> Reply:
    """Verify, parse, then act once per ``svix-id``: a delivery seen before is ignored."""
    problem = verify(verifier, body, headers)
    if problem:
        return Reply(400, error_body("bad_signature", f"webhook verification failed: {problem}"))
    try:
        event = parse_event(body)
    except InvalidEvent as exc:
        return Reply(422, error_body("invalid", str(exc)))  # bad input, as every source says
    delivery = headers.get("svix-id", "")  # present: the signature covers it
    deliveries = runner.store.tables.deliveries(runner.clock)
    if deliveries.seen(source, delivery):
        return Reply(200, {"status": "ignored", "reason": "delivery already handled"})
    thread_id = thread_id_from(event.external_id) if event.external_id else None
    if event.answered is None:
        detail = {"svix_id": delivery, "external_id": event.external_id, "data": event.data}
        actor, reason = f"webhook:{source}", Event.received(event.type)
        deliveries.record(source, delivery, thread_id or "-", actor, reason, detail)
        return Reply(200, {"status": "recorded", "type": event.type})

    def remember(tx: Tx) -> bool:
        return deliveries.remember(tx, source, delivery)

    reply = _answered(runner, source, event.answered, thread_id, remember)
    if not reply.remembered:
        deliveries.remember_now(source, delivery)
    return reply


def _answered(
    runner: Runner,
    source: str,
    answered: AnsweredData,
    thread_id: str | None,
    remember: Within,
) -> Reply:
    """The webhook as a source: the event's deciders decide, through the one decision path.
    A decision already claimed and handed off (the local inbox's CLI) is taken up here. A claim
    commits ``remember`` (the delivery id) with it: one transaction, not two."""
    if thread_id is None:
        return Reply(200, {"status": "ignored", "reason": "externalId is not for this app"})
    run = runner.runs.get(thread_id)
    request = run.asked if run else NOTHING_ASKED
    try:
        decisions = answered_by_position(answered, request)
    except UserError as exc:  # refused like any malformed answer: nothing is written
        invalid = {"reason": f"invalid decision: {exc}", "code": Refusal.INVALID.name.lower()}
        return Reply(200, {"status": "ignored", **invalid, "thread_id": thread_id})
    decision = Decision.read(
        decisions,
        thread_id=thread_id,
        interrupt_id=answered.id,
        approvers=approvers(answered),
        source=Source.WEBHOOK,
        digest=answered.digest,
    )
    result = runner.decide(decision, within=remember, run=run)
    accepted = {"status": "accepted", "thread_id": thread_id}
    if isinstance(result, Applied):
        return Reply(202, accepted, resume=result.run, remembered=True)
    if getattr(result, "reason", None) == Refusal.DECIDED:
        # the inbox command line's claim, still queued: wake our resumer (serverless: take it)
        queued = runner.lifecycle.queued_claim(thread_id, answered.id)
        if queued is not None:
            runner.hand_off(queued)
            return Reply(202, accepted, resume=queued)
    if not isinstance(result, Refused):  # counted toward a quorum
        return Reply(200, result.answer(thread_id))
    if result.reason == Refusal.HALTED:  # not remembered: the sender retries after the unhalt
        return Reply(423, error_body("halted", result.message), remembered=True)
    ignored = {"status": "ignored", "reason": result.message, "code": result.reason.name.lower()}
    details = {"details": result.details} if result.details else {}
    return Reply(200, {**ignored, **details, "thread_id": thread_id})


# ``source`` is read from the path rather than declared: FastAPI checks every declared parameter
# against pydantic.v1, whose import (~65 ms) a cold Lambda answering one delivery would pay. The
# schema documents the operation as a declared ``source: str`` would (a string always passes).
_DECLARED = {
    "parameters": [
        {
            "name": "source",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "title": "Source"},
        }
    ],
    "responses": {
        "422": {
            "description": "Validation Error",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}
            },
        }
    },
}


@router.post("/webhooks/{source}", openapi_extra=_DECLARED)
async def webhook(request: Request, background: BackgroundTasks) -> JSONResponse:
    source: str = request.path_params["source"]
    verifier = request.app.state.verifiers.get(source)
    if verifier is None:
        known = ", ".join(request.app.state.verifiers)
        raise ApiError(404, "unknown_source", f"no webhook source {source[:40]!r} here ({known})")
    runner: Runner = request.app.state.runner
    body = await request.body()
    reply = await run_in_threadpool(receive, runner, verifier, source, body, dict(request.headers))
    if reply.resume and settings.serverless():  # resumes inline, within its budget
        return await run_in_threadpool(answer_claimed, runner, reply.resume, background, reply.body)
    if reply.resume:  # 202 now; the resume is handed off after it, no second thread hop
        return answer_claimed(runner, reply.resume, background, reply.body)
    return JSONResponse(reply.body, status_code=reply.status_code)
