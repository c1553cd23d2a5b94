"""The version this install reports (``/healthz``, ``--version``): read from the installed
package's metadata, so ``pyproject.toml`` is the one place it is written."""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version


@lru_cache(maxsize=1)
def current() -> str:
    """The installed ``approval-worker`` version; ``0+unknown`` when run from a checkout that
    was never installed (``uv sync`` installs it)."""
    try:
        return version("approval-worker")
    except PackageNotFoundError:
        return "0+unknown"
