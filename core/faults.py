"""Fault injection for crash and timing tests; off unless ``FAULTS`` names a point.

``FAULTS="resume.start=sleep:1.5,after-claim=kill"``: at a named point, ``sleep:N`` pauses N
seconds, ``raise`` raises ``InjectedFault`` (a bug in a tool, say) and ``kill`` ends the process
at once (SIGKILL, as a crash would: no clean-up runs).
Points:

- ``after-claim``: a sweeper has claimed (or taken up) a decided run and not yet resumed it.
- ``resume.start``: a claimed (or reclaimed, or retried) run's resume begins.
- ``tool.after-write``: a side-effecting tool wrote downstream but has no receipt yet.
- ``segment.before-done``: the last checkpoint is written, the run not yet marked done.
- ``inbox.write``: inside the local inbox's write of a new request (not yet committed).
- ``answer.recorded``: one of several interrupts' answers is committed, the others not given.

Points after a commit (issue 40): what runs there (counting, logging, notifications, rendering
an answer) is :func:`shielded`, so an exception in it is logged and the run's next step still
happens. Each is named in :data:`AFTER_COMMIT`; a test raises at one with
``testkit.faults.raising_at`` (an in-process hook, never set in production).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable

from core.errors import one_line
from core.settings import FAULTS

log = logging.getLogger(__name__)

# The places after a commit, in the order a run meets them.
AFTER_COMMIT = (
    "transition.committed",  # any transition: its count, log line and notifications' flush
    "start.created",  # the run row exists; the caller's on_start, then the first segment
    "start.answer",  # the start's answer is rendered (POST /runs)
    "decide.claimed",  # the claim is committed; the decision's count and log line
    "handoff.queued",  # the claimed run (a decision's, a retry's) is queued for a resumer
    "decide.answer",  # the decision's answer is rendered (API, webhook, page, e-mail, /lg)
    "resume.claimed",  # a resumer took the claimed run; the decision-to-resume time is counted
)

_hook: Callable[[str], None] | None = None  # testkit.faults only


class InjectedFault(RuntimeError):
    pass


def install(hook: Callable[[str], None] | None) -> None:
    """Call ``hook`` at every fault point (it may raise); None removes it. Tests only."""
    global _hook
    _hook = hook


def shielded(point: str, step: Callable[[], object]) -> None:
    """Run ``step``, code after a commit named ``point`` (one of :data:`AFTER_COMMIT`): an
    exception in it is logged and swallowed, since what was committed stands and the run's
    next step must not depend on a count, a log line or a rendering."""
    try:
        fault(point)
        step()
    except Exception as exc:  # noqa: BLE001 - the commit stands; the next step follows
        try:
            log.warning("after a commit (%s), carried on past: %s", point, one_line(exc))
        except Exception:  # noqa: BLE001, S110 - logging itself broken: nothing left to tell
            pass


def fault(point: str) -> None:
    hook = _hook
    if hook is not None:
        hook(point)
    spec = FAULTS.get()
    if not spec:
        return
    for entry in spec.split(","):
        name, _, action = entry.strip().partition("=")
        if name != point:
            continue
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "raise":
            raise InjectedFault(f"injected fault at {point}")
        elif action.startswith("sleep:"):
            # said before the pause, so a test can wait for the point instead of guessing
            logging.getLogger("core.faults").warning("fault %s: pausing (%s)", point, action)
            time.sleep(float(action.split(":", 1)[1]))
