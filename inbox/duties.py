"""Who may approve: separation of duties, and how people are told apart when a quorum counts
them. The one decision path (``worker.decisions``) applies it to a decision from any source.
Identities are compared by :func:`core.identity.identity_key` (the confusable skeleton after NFKC
and case folding), the one comparison every rule uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.errors import UserError
from core.identity import identity_key

APPROVING = frozenset({"approve", "edit"})


class SelfApproval(UserError):
    """The requester tried to approve (or edit) their own run under separation of duties."""


def distinct(names: Iterable[str | None]) -> list[str]:
    """Approvers in order of first appearance, each once by their identity."""
    seen: dict[str, str] = {}
    for name in names:
        if name and name.strip():
            seen.setdefault(identity_key(name), name.strip())
    return list(seen.values())


def approving(decisions: list[dict[str, Any]]) -> bool:
    return any(isinstance(d, dict) and d.get("type") in APPROVING for d in decisions)


def check_duties(
    approvers: list[str], requested_by: str | None, separation: bool, what: str
) -> None:
    """Refuse an approval by the requester (with ``separation``), or one that names nobody when
    the requester must be told apart. A reject or respond is never judged here."""
    if not separation:
        return
    if not requested_by:
        raise SelfApproval(
            f"{what} has no recorded requester, so separation of duties cannot be checked"
        )
    if identity_key(requested_by) in {identity_key(n) for n in approvers}:
        raise SelfApproval(
            f"{requested_by} asked for {what} and may not approve it; another reviewer must decide"
        )
    if not approvers:
        raise SelfApproval(f"an approval of {what} must name who decided")
