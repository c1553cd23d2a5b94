"""Fault injection for crash and timing tests; off unless ``FAULTS`` names a point.

``FAULTS="resume.start=sleep:1.5,after-claim=kill"``: at a named point, ``sleep:N`` pauses N
seconds and ``kill`` ends the process at once (SIGKILL, as a crash would: no clean-up runs).
Points: ``resume.start`` (a claimed run's resume begins).
"""

from __future__ import annotations

import os
import signal
import time


def fault(point: str) -> None:
    spec = os.environ.get("FAULTS")
    if not spec:
        return
    for entry in spec.split(","):
        name, _, action = entry.strip().partition("=")
        if name != point:
            continue
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action.startswith("sleep:"):
            time.sleep(float(action.split(":", 1)[1]))
