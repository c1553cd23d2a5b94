"""Start a run from the checkout: ``uv run run.py "Refund order A-1001: ..."``.

The same as the installed ``approval-worker run`` (see ``approval_worker/commands.py``): one
graph segment, then exit; exit 0 paused or finished, 1 failed or the database could not be
reached, 2 bad input or settings.
"""

import sys

from core import coldstart

coldstart.pause()  # until the graph is built: see core/coldstart.py

from approval_worker.commands import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run())
