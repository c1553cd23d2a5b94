"""Turning a signed inbox delivery into at most one claimed resume.

Only a verified, well-formed ``interrupt.answered`` for the interrupt a run waits on claims it;
everything else that is verified is acknowledged with 2xx (Svix retries any other status for a
day), so redeliveries, late answers and foreign events are harmless.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.runner import Runner
from inbox import thread_id_from
from inbox.events import InvalidEvent, decided_by, parse_event, to_decisions
from store.runs import new_owner


@dataclass
class Reply:
    status_code: int
    body: dict[str, Any]
    resume: tuple[str, str] | None = field(default=None)  # (thread_id, owner) to resume after


def verify(verifier, body: bytes, headers: dict[str, str]) -> str | None:
    """None if the signature holds, else a short reason (never the secret or the signature)."""
    from svix.webhooks import WebhookVerificationError

    try:
        verifier.verify(body, headers)
    except WebhookVerificationError as exc:
        return str(exc) or "signature verification failed"
    except UnicodeDecodeError:
        return "body is not UTF-8"
    except ValueError:  # malformed signature header (no comma, bad base64)
        return "malformed signature header"
    return None


def receive(runner: Runner, verifier, source: str, body: bytes, headers: dict[str, str]) -> Reply:
    problem = verify(verifier, body, headers)
    if problem:
        return Reply(400, {"error": f"webhook verification failed: {problem}"})
    try:
        event = parse_event(body)
    except InvalidEvent as exc:
        return Reply(422, {"error": str(exc)})
    delivery = headers.get("svix-id")
    thread_id = thread_id_from(event.external_id) if event.external_id else None
    if event.answered is None:
        runner.runs.record(
            thread_id or "-",
            f"webhook:{source}",
            f"event {event.type}",
            {"svix_id": delivery, "external_id": event.external_id, "data": event.data},
        )
        return Reply(200, {"status": "recorded", "type": event.type})
    if thread_id is None:
        return Reply(200, {"status": "ignored", "reason": "externalId is not for this app"})
    owner = new_owner("webhook")
    reason = runner.claim(
        thread_id,
        event.answered.id,
        to_decisions(event.answered),
        owner,
        decided_by=decided_by(event.answered),
    )
    if reason:
        return Reply(200, {"status": "ignored", "reason": reason, "thread_id": thread_id})
    return Reply(202, {"status": "accepted", "thread_id": thread_id}, resume=(thread_id, owner))
