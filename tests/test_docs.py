"""The documentation: the site builds strictly (broken links, missing pages and anchors fail),
the generated reference pages match the code, and the README stays a short front door."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

from approval_worker import reference


def test_the_site_builds_strictly(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr  # as CI runs it: no quiet flag hides one
    for page in ("tutorial", "how-to/docker", "how-to/kubernetes", "how-to/lambda"):
        assert (tmp_path / "site" / page / "index.html").exists(), page
    for page in ("how-to/systemd", "how-to/postgres", "how-to/upgrade-and-migrations"):
        assert (tmp_path / "site" / page / "index.html").exists(), page
    for page in ("reference/settings", "reference/cli", "reference/http-api"):
        assert (tmp_path / "site" / page / "index.html").exists(), page
    assert (tmp_path / "site" / "explanation" / "design" / "index.html").exists()


def test_generated_reference_pages_match_the_code():
    for path, text in reference.pages().items():
        assert path.read_text() == text, (
            f"{path.relative_to(ROOT)} drifted: run `uv run python -m approval_worker.reference "
            "--write`"
        )


def test_the_readme_is_a_short_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 15_000
    for command in (
        'uv run run.py "Refund order A-1001: the kettle arrived broken"',
        "uv run pytest -n 4 --dist loadfile",
    ):
        assert command in readme
    assert "\nuv run pytest -n 4 --dist loadfile\n" in (ROOT / ".ci/run").read_text()  # CI runs it
    assert "not a library" in readme
    for link in ("docs/tutorial.md", "docs/reference/settings.md", "LICENSE", "CHANGELOG.md"):
        assert f"]({link})" in readme and (ROOT / link).exists(), link


def test_release_files_exist():
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "Keep a Changelog" in changelog and "## [0.1.0]" in changelog
    from core import version

    assert f"## [{version.current()}]" in changelog  # the version the app reports is released
    for name in ("SECURITY.md", "CONTRIBUTING.md"):
        assert (ROOT / name).stat().st_size > 500
