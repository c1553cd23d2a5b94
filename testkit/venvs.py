"""A fresh virtual environment holding only ``cryptography`` (and what it needs to import:
cffi, pycparser), copied from this project's environment, so an offline check is shown to need
nothing else; no network, no pip."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ONLY = ("cryptography", "cffi", "pycparser")


def crypto_only_venv(folder: Path) -> Path:
    """The python of a new venv in ``folder`` with nothing but ``cryptography`` installed."""
    import cryptography

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    source = Path(cryptography.__file__).resolve().parent.parent
    [target] = list(folder.glob("lib/python*/site-packages"))
    for entry in source.iterdir():
        name = entry.name.lower()
        if name.startswith(ONLY) or name.startswith("_cffi_backend"):
            copy = shutil.copytree if entry.is_dir() else shutil.copy2
            copy(entry, target / entry.name)
    return folder / "bin" / "python"
