"""The approval rules the worker applies to every workflow: the approval window, the escalation
ladder, and separation of duties (who may approve is checked by :mod:`inbox.duties`)."""

from __future__ import annotations

from core import settings


def default_window() -> float:
    """``APPROVAL_EXPIRES_IN``: seconds reviewers have, for workflows without their own."""
    return settings.APPROVAL_EXPIRES_IN.get()


def window(setting: settings.Setting[float | None] | None) -> float:
    """A workflow's own window setting if it is set, else the default one."""
    own = setting.get() if setting is not None else None
    return own if own is not None else default_window()


def ladder_points() -> tuple[float, float]:
    """Fractions of the approval window at which to remind and to escalate; ``0`` is off."""
    return settings.APPROVAL_REMIND_AT.get(), settings.APPROVAL_ESCALATE_AT.get()


def next_ladder_at(start: float, end: float | None, done: int) -> float | None:
    """When the ladder step after ``done`` (0 none, 1 reminded, 2 escalated) falls due for an
    approval waiting from ``start`` to ``end``: stored on the run, so a sweep finds the due ones
    through an index instead of computing this for every waiting run. None: no step left."""
    if end is None:
        return None
    # the earliest step left: an escalation point set before the reminder's also covers it
    points = [p for step, p in zip((1, 2), ladder_points(), strict=True) if p and done < step]
    return start + min(points) * (end - start) if points else None


def separation_of_duties() -> bool:
    """``SEPARATION_OF_DUTIES=1``: whoever requested a run may not approve it."""
    return settings.SEPARATION_OF_DUTIES.get()
