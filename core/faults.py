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
"""

from __future__ import annotations

import logging
import os
import signal
import time

from core.settings import FAULTS


class InjectedFault(RuntimeError):
    pass


def fault(point: str) -> None:
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
