"""Delegation, as the one decision path applies it: a decision taken *for* someone (the
source names them explicitly, ``Decision.on_behalf_of``) stands only while that person's
delegation to the one approver is active; it is recorded as ``bob for alice``, judged by the
authority alice lent (the groups she held when she delegated, never the delegate's own nor
anything delegated to her: one step), counts toward a quorum as alice's approval and takes up
bob too (one person never counts twice), and never approves a request either of them made.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime

from core.errors import UserError
from core.identity import identity_key
from core.limits import check_name
from store.delegations import Delegation, Delegations
from store.queue import Eligible
from store.states import Run
from worker.ballot import Decision
from worker.refusals import Refusal, Refused

MAX_DAYS = 90  # the longest a delegation may last (an absence, not a standing grant)


@dataclass(frozen=True)
class Acting:
    """A delegate acting for a delegator: how the approval is shown and whom it counts as."""

    shown: str  # "bob for alice"
    principal_key: str  # alice, normalised: whose approval it is
    actor_key: str  # bob, normalised: who acted


def resolve(
    d: Decision, run: Run, approving: bool, delegations: Delegations, now: float | None = None
) -> tuple[Decision, Acting | None] | Refused:
    """The decision as the path judges it: for a delegate, the one approver becomes ``bob for
    alice`` holding alice's lent groups; or the refusal (no active delegation, or a request
    one of them made)."""
    if d.on_behalf_of is None:
        return d, None
    if len(d.approvers) != 1:
        return Refused(
            Refusal.INVALID, "invalid decision: a decision for someone names one approver"
        )
    actor = d.approvers[0]
    try:
        principal = check_name(d.on_behalf_of, "on_behalf_of")
    except UserError as exc:
        return Refused(Refusal.INVALID, f"invalid decision: {exc}")
    actor_key, principal_key = identity_key(actor), identity_key(principal)
    if actor_key == principal_key:  # acting for yourself is acting as yourself
        return replace(d, on_behalf_of=None), None
    at = time.time() if now is None else now
    lent = [x for x in delegations.active_to(actor_key, at) if x.delegator_key == principal_key]
    if not lent:
        return Refused(
            Refusal.DELEGATION,
            f"{actor} holds no delegation from {principal} now (it never existed, has not "
            "started, ended or was revoked); decide as yourself",
        )
    requester = identity_key(run.requested_by) if run.requested_by else None
    if approving and requester in (actor_key, principal_key):
        return Refused(
            Refusal.DUTIES,
            f"{run.requested_by} asked for this request; a delegation never lets anyone "
            "approve their own request (another reviewer must decide)",
            {"run": run.thread_id},
        )
    shown = f"{actor} for {lent[0].delegator}"
    groups = frozenset().union(*(x.groups for x in lent))
    acting = Acting(shown, principal_key, actor_key)
    return replace(d, approvers=[shown], groups={shown: groups}), acting


def keys(approvers: list[str], acting: Acting | None) -> dict[str, tuple[str, str]]:
    """Each approver's (principal, actor) keys: whose approval it counts as, and who acted."""
    out = {}
    for name in approvers:
        if acting is not None and name == acting.shown:
            out[name] = (acting.principal_key, acting.actor_key)
        else:
            out[name] = (identity_key(name), identity_key(name))
    return out


def principals(name: str, groups: frozenset[str], delegations: Delegations) -> tuple[Eligible, ...]:
    """Whom ``name`` may decide as now: themselves with their own groups, then each person who
    delegated to them with the groups lent (what the "waiting on me" view filters by)."""
    me = identity_key(name)
    lent: dict[str, frozenset[str]] = {}
    for x in delegations.active_to(me):
        if x.delegator_key != me:
            lent[x.delegator_key] = lent.get(x.delegator_key, frozenset()) | x.groups
    return (Eligible(me, groups), *(Eligible(k, g, True) for k, g in sorted(lent.items())))


class DelegationError(UserError):
    """A delegation that cannot be made or revoked: ``status`` and ``code`` for the API."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code = status, code


MAX_ACTIVE = 10  # delegations one person has running at once, either way


def parse_end(text: str, now: float) -> float:
    """An ISO 8601 moment with its time zone (``2026-12-24T18:00:00Z``), in the future and at
    most ``MAX_DAYS`` ahead, as epoch seconds."""
    if not isinstance(text, str) or not 1 <= len(text) <= 40:
        raise DelegationError(
            422, "invalid_end", "ends_at: an ISO 8601 time, e.g. 2026-12-24T18:00Z"
        )
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise DelegationError(
            422, "invalid_end", f"ends_at {text[:40]!r} is not an ISO 8601 time"
        ) from None
    if moment.tzinfo is None:
        raise DelegationError(422, "invalid_end", "ends_at needs its time zone (Z or +01:00)")
    at = moment.timestamp()
    if at <= now:
        raise DelegationError(422, "invalid_end", "ends_at must be in the future")
    if at > now + MAX_DAYS * 86400:
        raise DelegationError(422, "invalid_end", f"a delegation lasts at most {MAX_DAYS} days")
    return at


def grant(
    delegations: Delegations,
    delegator: str,
    groups: frozenset[str],
    delegate: str,
    ends_at: str,
    credential: str | None = None,
) -> Delegation:
    """``delegator`` lends ``groups`` (their own, as their credential holds them now) to
    ``delegate`` from now until ``ends_at``. Never to themselves; bounded in number. It ends
    early when ``credential`` (the delegator's API key, ``key:<id>``) is revoked."""
    try:
        name = check_name(delegate, "delegate")
    except UserError as exc:
        raise DelegationError(422, "invalid_delegate", str(exc)) from None
    now = delegations.clock()
    end = parse_end(ends_at, now)
    me, them = identity_key(delegator), identity_key(name)
    if me == them:
        raise DelegationError(422, "invalid_delegate", "you cannot delegate to yourself")
    if delegations.count_from(me) >= MAX_ACTIVE or len(delegations.active_to(them)) >= MAX_ACTIVE:
        raise DelegationError(
            409, "too_many", f"at most {MAX_ACTIVE} delegations run at once from or to one person"
        )
    return delegations.create(
        (delegator, me), (name, them), groups, end, delegator, credential=credential
    )


def revoke(delegations: Delegations, delegation_id: str, who: str, admin: bool) -> Delegation:
    """End a delegation now: its delegator, its delegate (declining it) or an admin may."""
    found = delegations.get(delegation_id[:40])
    me = identity_key(who)
    if found is None or not (admin or me in (found.delegator_key, found.delegate_key)):
        raise DelegationError(
            404, "unknown_delegation", f"no delegation {delegation_id[:40]!r} of yours"
        )
    ended = delegations.revoke(found.id)
    if ended is None:
        raise DelegationError(
            409, "delegation_ended", "that delegation already ended or was revoked"
        )
    return ended
