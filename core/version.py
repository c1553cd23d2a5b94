"""The version this install reports (``/healthz``, ``--version``): read from the installed
package's metadata, so ``pyproject.toml`` is the one place it is written."""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version


@lru_cache(maxsize=1)
def current() -> str:
    """The installed ``approval-worker`` version; where the code runs uninstalled (a Lambda
    bundle, a checkout before ``uv sync``), the ``pyproject.toml`` beside the packages."""
    try:
        return version("approval-worker")
    except PackageNotFoundError:
        pass
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    except (OSError, KeyError, ValueError):
        return "0+unknown"
