"""The recovery sweep from the checkout: ``uv run recover.py [--wait | --forever] ...``.

The same as the installed ``approval-worker recover`` (see ``approval_worker/commands.py``);
exit 0 every run handled is done or paused, 1 one failed or the database could not be reached,
2 bad input or settings.
"""

import sys

from approval_worker.commands import recover

if __name__ == "__main__":
    sys.exit(recover())
