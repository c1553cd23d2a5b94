"""The Lambda bundle's source, from an allow-list: the handler and the packages it imports,
nothing else. ``CodeUri: ../..`` copied the whole checkout (its ``approvals.db`` with runs,
decisions and key digests, the tests, docs and bench: 183 MB of Lambda's 262 MB).

    python3 deploy/aws/stage.py     # in the repository root: writes dist/lambda

Then ``uv export ... -o dist/lambda/requirements.txt`` and ``sam build`` (the template's
``CodeUri`` is ``dist/lambda``). Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGE = ROOT / "dist" / "lambda"
# what ``lambda_handler`` imports (tests/test_lambda_build.py runs the bundle alone, so a
# missing one fails), and pyproject.toml for the version ``/healthz`` reports; workflows of
# your own: add their package here
INCLUDE = (
    "lambda_handler.py",
    "pyproject.toml",
    *("api", "core", "store", "inbox", "ops", "worker", "agent"),
)
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.db", "*.db-*", ".env", ".env.*")


def stage(root: Path = ROOT, dest: Path = STAGE) -> Path:
    """Copy the allow-listed files of ``root`` to ``dest`` (emptied first)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in INCLUDE:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=SKIP)
        else:
            shutil.copy2(source, dest / name)
    return dest


if __name__ == "__main__":
    print(stage(ROOT, Path(sys.argv[1]) if len(sys.argv) > 1 else STAGE))
