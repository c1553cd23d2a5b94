"""The tutorial works as written: its commands, read from docs/tutorial.md, typed into one shell
on a fresh directory, the app served on 127.0.0.1, the browser steps taken in Chromium, and
each step shows what the page says it shows (``testkit.tutorial``)."""

from __future__ import annotations

import re
import shutil

import pytest
from conftest import ROOT

from testkit.servers import free_port
from testkit.tutorial import BROWSER_STEPS, commands, follow, missing, steps

# characters of a code block's line the site shows whole at 1280 px (688 px of 13.6 px mono)
WIDTH = 78


def test_the_page_is_steps_a_newcomer_can_follow():
    found = steps()
    assert len(found) >= 8
    assert sum(step.browser for step in found) == len(BROWSER_STEPS)
    for step in found:
        shown = [line for b in step.blocks if b.kind != "image" for line in b.text.splitlines()]
        too_long = [line for line in shown if len(line) > WIDTH]
        assert not too_long, f"lines cut off at the block's edge at 1280 px: {too_long}"
        for line in (c for b in step.blocks if b.kind == "sh" for c in commands(b.text)):
            assert not line.lstrip().startswith("#"), f"a comment typed as a command: {line}"
            assert "uv run" not in line and "python -m" not in line, line  # the installed command
        expected = [b for b in step.blocks if b.kind == "text"]
        assert expected, f"step {step.title!r} never says what you should see"


def test_missing_reads_ellipses_as_any_text():
    line = "paused on interrupt 8f - state saved, exiting"
    assert missing("paused on interrupt ... - state saved, exiting", line) == []
    assert missing("a ... c", "a b d") == ["a ... c"]


@pytest.mark.process  # a shell, the installed command and the app under uvicorn
def test_following_the_tutorial_on_a_fresh_directory(tmp_path, browser):
    if shutil.which("uv") is None or shutil.which("openssl") is None:
        pytest.fail("the tutorial needs uv and openssl on PATH, as its page says")
    shots = tmp_path / "shots"  # as the screenshot command takes them, from these pages
    shots.mkdir()
    reports = follow(tmp_path / "approval-tutorial", free_port(), browser, shots=shots)
    for report in reports:
        assert not report.gaps, (
            f"step {report.title!r} did not show {report.gaps}; it showed:\n{report.output}"
        )
    from bench.inbox import TUTORIAL_SHOTS

    assert sorted(p.name for p in shots.iterdir()) == sorted(TUTORIAL_SHOTS)
    workdir = tmp_path / "approval-tutorial"
    assert (workdir / "approvals.db").exists()
    secret = (workdir / ".env").read_text().strip().split("=", 1)[1]
    assert secret.startswith("whsec_") and secret not in (workdir / "serve.log").read_text()
    timings = ", ".join(f"{r.title}: {r.seconds:.1f}s" for r in reports)
    total = sum(r.seconds for r in reports)
    print(f"the tutorial's commands and pages took {total:.0f}s ({timings})")


def test_every_screenshot_in_the_docs_is_one_the_command_writes():
    """Pictures of the pages come from the pages: each .png the docs show is written by
    ``uv run python -m bench.inbox --screenshots docs``, and each it writes is shown."""
    from bench.inbox import SHOTS, TUTORIAL_SHOTS, tested_shots

    docs = ROOT / "docs"
    shown = set()
    for page in [*docs.rglob("*.md"), ROOT / "README.md"]:
        for name in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page.read_text()):
            path = (page.parent / name).resolve()
            assert path.exists(), f"{page.relative_to(ROOT)} shows {name}, which does not exist"
            shown.add(path.relative_to(docs).as_posix())
    written = set(SHOTS + TUTORIAL_SHOTS + tested_shots())
    assert {p.name for p in docs.glob("*.png")} == written
    assert shown == written
