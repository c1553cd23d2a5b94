"""Who may approve: separation of duties and the quorum, one rule for every source of decisions.

The local inbox applies it when a reviewer answers (to refuse early, with a reason) and the
worker applies it again at the claim, whatever the decision's source; both call :func:`check`.
Identities are compared normalised (case and surrounding or repeated space do not matter).
"""

from __future__ import annotations

from collections.abc import Iterable

from core.errors import UserError

APPROVING = frozenset({"approve", "edit"})


class SelfApproval(UserError):
    """The requester tried to approve (or edit) their own run under separation of duties."""


class QuorumNotMet(UserError):
    """An approval that needs more distinct approvers than it names."""


def normalize(name: str) -> str:
    return " ".join(name.split()).casefold()


def distinct(names: Iterable[str | None]) -> list[str]:
    """Approvers in order of first appearance, each once by their normalised name."""
    seen: dict[str, str] = {}
    for name in names:
        if name and name.strip():
            seen.setdefault(normalize(name), name.strip())
    return list(seen.values())


def approving(decisions: list[dict]) -> bool:
    return any(isinstance(d, dict) and d.get("type") in APPROVING for d in decisions)


def check(
    decisions: list[dict],
    approvers: list[str],
    *,
    requested_by: str | None,
    separation: bool,
    quorum: int,
    what: str,
) -> None:
    """Refuse an approval by the requester (with ``separation``) or by fewer than ``quorum``
    distinct approvers. A reject or respond needs one reviewer and passes."""
    if not approving(decisions):
        return
    names = distinct(approvers)
    if separation:
        if not requested_by:
            raise SelfApproval(
                f"{what} has no recorded requester, so separation of duties cannot be checked"
            )
        if normalize(requested_by) in {normalize(n) for n in names}:
            raise SelfApproval(
                f"{requested_by} requested {what} and may not approve it "
                "(SEPARATION_OF_DUTIES=1); another reviewer must decide"
            )
        if not names:
            raise SelfApproval(f"an approval of {what} must name who decided")
    if quorum > 1 and len(names) < quorum:
        raise QuorumNotMet(
            f"{what} needs {quorum} distinct approvers, got {len(names)} "
            f"({', '.join(names) or 'none named'})"
        )
