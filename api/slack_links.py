"""Linking a Slack user to a reviewer, proven from both sides, and who a linked press is now.

A link is a credential, not a name: it is started on one side and confirmed on the other with a
one-time code (10 minutes). From the product, ``POST /me/slack {"slack_user_id"}`` answers a code
that the same person types in Slack as ``/approvals link <code>``; from Slack, ``/approvals
link`` answers a code that the reviewer sends as ``POST /me/slack {"code"}``. A Slack user that
is linked already is never re-linked (409) until its reviewer unlinks it
(``DELETE /me/slack/{id}``). A press then decides as the linked reviewer only
while the credential that vouched for the link is valid at that moment: the key not revoked and
still a reviewer's, or a JWT before its expiry (:func:`vouched`). Every refusal is a 4xx in the
one error shape and changes no table.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from api.auth import Reviewer
from api.errors import ApiError
from core import settings
from core.identity import Principal, Provenance, same_identity
from core.settings.channels import slack_on
from store.slack import CODE_SECONDS, Link, LinkTaken, SlackTables, Started
from worker.runner import Runner

router = APIRouter()
SLACK_USER = r"^[UW][A-Z0-9]{2,30}$"
CODE = r"^[0-9a-f]{10}$"
WINDOW = 300  # seconds: Slack's own replay window for a signed request


class SlackLinkBody(BaseModel):
    """Either the Slack user to link (then confirm from Slack), or the code Slack gave you."""

    model_config = ConfigDict(extra="forbid")

    slack_user_id: str | None = Field(default=None, pattern=SLACK_USER)
    code: str | None = Field(default=None, pattern=CODE)


def verified(body: bytes, headers: dict[str, str]) -> None:
    """Slack's own signature on a request (button press or slash command), or 401."""
    from slack_sdk.signature import SignatureVerifier

    bad = ApiError(401, "bad_signature", "Slack signature verification failed")
    stamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    # slack_sdk reads the timestamp with int(): a missing or non-numeric one raised there (a
    # 500 and a traceback); it is a bad request like any other unsigned one
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12 and signature):
        raise bad
    verifier = SignatureVerifier(str(settings.SLACK_SIGNING_SECRET.get()))
    try:
        valid = verifier.is_valid(body, stamp, signature)
    except (TypeError, ValueError):  # anything the library cannot read is not signed
        valid = False
    if not valid:
        raise bad


def off() -> ApiError:
    return ApiError(404, "not_found", "Slack is not configured here")


def _taken(slack_user: str) -> ApiError:
    return ApiError(
        409, "slack_linked", f"Slack user {slack_user} is linked already; a link is never replaced"
    )


def _unknown_code() -> ApiError:
    return ApiError(
        404, "unknown_code", f"no link is waiting for this code (codes last {CODE_SECONDS} s)"
    )


def vouched(runner: Runner, link: Link | None, now: float) -> Principal:
    """The reviewer behind a Slack user, as of ``now``: the credential that vouched for the link
    must be valid now (a revoked key, a key that no longer reviews or an expired JWT ends the
    link's power at once)."""
    if link is None or link.credential is None:
        raise ApiError(
            403,
            "unlinked",
            "link your Slack user first: POST /me/slack, then confirm from Slack",
        )
    if link.credential.startswith("key:"):
        key = runner.store.tables.keys().get(link.credential[4:])
        if key is None or not key.reviews or not same_identity(key.name, link.reviewer):
            raise ApiError(
                401, "unauthorized", "the API key behind this Slack link is revoked; link again"
            )
        roles = frozenset(str(r) for r in key.roles)
        return Principal(link.reviewer, roles, link.credential, Provenance.SLACK, key.groups)
    if link.valid_until is None or link.valid_until < now:
        raise ApiError(401, "unauthorized", "the sign-in behind this Slack link has expired")
    return Principal(link.reviewer, frozenset({"reviewer"}), link.credential, Provenance.SLACK)


@router.post("/me/slack", tags=["channels"], status_code=200)
def link_slack(body: SlackLinkBody, request: Request, who: Reviewer) -> JSONResponse:
    """Link your Slack user, proven from both sides: name it here and type the code you get in
    Slack (``/approvals link <code>``), or send here the code ``/approvals link`` gave you."""
    if not slack_on():
        raise off()
    if (body.slack_user_id is None) == (body.code is None):
        raise ApiError(422, "invalid", "send slack_user_id or the code Slack gave you")
    runner: Runner = request.app.state.runner
    tables, now = runner.store.tables.slack(), runner.clock()
    until = who.expires_at  # a link made with a JWT ends with it
    if body.code is not None:
        half = tables.pending(body.code, now)
        if half is None or half.started_by != "slack":
            raise _unknown_code()
        linked = Link(half.slack_user, who.name, who.via, until)
        _complete(tables, body.code, linked, now)
        return JSONResponse(_linked(linked), status_code=200)
    slack_user = body.slack_user_id or ""
    existing = tables.link_of(slack_user)
    if existing is not None and existing.proven:
        if not same_identity(existing.reviewer, who.name):
            raise _taken(slack_user)
        return JSONResponse(_linked(existing), status_code=200)
    code = tables.start(Started(slack_user, who.name, who.via, until, "product"), now)
    answer = {
        "status": "pending",
        "slack_user_id": slack_user,
        "reviewer": who.name,
        "confirm": f"/approvals link {code}",
        "expires_in": CODE_SECONDS,
    }
    return JSONResponse(answer, status_code=202)


@router.delete("/me/slack/{slack_user_id}", tags=["channels"])
def unlink_slack(slack_user_id: str, request: Request, who: Reviewer) -> dict[str, str]:
    """End your own Slack link (the only way a linked Slack user is linked to someone else)."""
    if not slack_on():
        raise off()
    runner: Runner = request.app.state.runner
    tables = runner.store.tables.slack()
    link = tables.link_of(slack_user_id[:40])
    if link is None or not same_identity(link.reviewer, who.name) or not tables.unlink(link):
        raise ApiError(404, "not_found", f"no Slack link of yours for {slack_user_id[:40]!r}")
    return {"status": "unlinked", "slack_user_id": link.slack_user, "reviewer": link.reviewer}


def _linked(link: Link) -> dict[str, str]:
    return {"status": "linked", "slack_user_id": link.slack_user, "reviewer": link.reviewer}


def _complete(tables: SlackTables, code: str, link: Link, now: float) -> None:
    try:
        tables.complete(code, link, now)
    except LinkTaken:
        existing = tables.link_of(link.slack_user)
        if existing is not None and existing.proven:
            raise _taken(link.slack_user) from None
        raise _unknown_code() from None


def command(runner: Runner, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """``/approvals link [code]`` from Slack, signed: start a link from Slack, or confirm one
    started in the product by the same Slack user."""
    if not slack_on():
        raise off()
    verified(body, headers)
    signature = headers.get("x-slack-signature", "")
    tables, now = runner.store.tables.slack(), runner.clock()
    if tables.seen(signature, now):
        raise ApiError(409, "replayed", "this command was already taken")
    try:
        form = parse_qs(body.decode(), strict_parsing=True)
        user, words = form["user_id"][0], (form.get("text") or [""])[0].split()
    except (KeyError, IndexError, ValueError, UnicodeDecodeError):
        raise ApiError(422, "invalid", "not a Slack slash command") from None
    if not words or words[0] != "link" or len(words) > 2:
        raise ApiError(422, "invalid", "usage: /approvals link [code]")
    if len(words) == 1:
        existing = tables.link_of(user)
        if existing is not None and existing.proven:
            raise _taken(user)
        code = tables.start(Started(user, None, None, None, "slack"), now)
        text = (
            f'Signed in to the product as yourself, send POST /me/slack {{"code": "{code}"}} '
            f"within {CODE_SECONDS // 60} minutes."
        )
    else:
        half = tables.pending(words[1], now)
        if half is None or half.started_by != "product" or half.reviewer is None:
            raise _unknown_code()
        if half.slack_user != user or half.credential is None:
            raise ApiError(403, "wrong_slack_user", "this code links another Slack user")
        linked = Link(user, half.reviewer, half.credential, half.valid_until)
        _complete(tables, words[1], linked, now)
        text = f"Linked: your Approve and Reject presses now decide as {half.reviewer}."
    tables.first_sight(signature, float(headers["x-slack-request-timestamp"]) + WINDOW, now)
    return {"response_type": "ephemeral", "text": text}


@router.post("/slack/commands", tags=["channels"])
async def commands(request: Request) -> JSONResponse:
    """A signed Slack slash command (``/approvals link [code]``)."""
    body = await request.body()
    headers = {k.lower(): v for k, v in request.headers.items()}
    runner: Runner = request.app.state.runner
    return JSONResponse(await run_in_threadpool(command, runner, body, headers))
