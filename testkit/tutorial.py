"""Following docs/tutorial.md as a newcomer does: its commands, read from the page, typed into
one bash session that starts in the clone, each step's output held to the page's "you should
see" block, and its browser steps taken in Chromium on the real pages.

The test (tests/test_tutorial.py) and the screenshot command (``uv run python -m bench.inbox
--screenshots docs``) both follow the page through :func:`follow`, so the page, its pictures and
the product cannot drift apart. The only liberties taken, each so that a run on a shared machine
stays isolated: the tutorial's directory is a fresh one, the app's port a free one, ``uv sync``
is ``--locked --offline`` (it must not rewrite the lock), no setting is inherited, and ``<id>``
is the interrupt id the page tells the reader to copy.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testkit.databases import ROOT, settings_to_clear
from testkit.wait import until

TUTORIAL = ROOT / "docs" / "tutorial.md"
PAGE_PORT = "8000"  # the port the page uses (the app's default)
TUTORIAL_DIR = "~/approval-tutorial"
USER = "sam"  # the reader's user name, the requester of the runs they start


@dataclass
class Block:
    kind: str  # "sh", "text" or "image"
    text: str


@dataclass
class Step:
    title: str
    body: str
    blocks: list[Block]

    @property
    def browser(self) -> bool:
        """A step done in the browser: it types nothing."""
        return not any(b.kind == "sh" for b in self.blocks)

    def images(self) -> list[str]:
        return [b.text for b in self.blocks if b.kind == "image"]


def steps(text: str | None = None) -> list[Step]:
    """The page's numbered steps (``## N. Title``), each with its fenced blocks and images in
    the order they appear."""
    text = TUTORIAL.read_text() if text is None else text
    found = []
    parts = re.split(r"^## \d+\. (.+)$", text, flags=re.M)
    for title, body in zip(parts[1::2], parts[2::2], strict=True):
        blocks = [
            Block("image", m.group(3)) if m.group(3) else Block(m.group(1), m.group(2))
            for m in re.finditer(
                r"^```(sh|text)\n(.*?)^```$|^!\[[^\]]*\]\(([^)]+\.png)\)", body, re.M | re.S
            )
        ]
        found.append(Step(title, body, blocks))
    return found


def commands(block: str) -> list[str]:
    """A shell block's commands, one per line, a trailing backslash joining the next."""
    joined = re.sub(r"\\\n\s*", "", block)
    return [line for line in joined.splitlines() if line.strip()]


def missing(expected: str, got: str) -> list[str]:
    """The lines of ``expected`` that match no line of ``got`` (``...`` stands for any text)."""
    lines = [line.strip() for line in got.splitlines()]
    gaps = []
    for want in expected.strip().splitlines():
        pattern = ".*".join(re.escape(part) for part in want.strip().split("..."))
        if not any(re.fullmatch(pattern, line) for line in lines):
            gaps.append(want)
    return gaps


class Shell:
    """One bash session: what the reader's terminal does with each command typed into it."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            text=True,
            start_new_session=True,  # its own process group: the app it backgrounds stops with it
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def run(self, command: str, timeout: float = 180) -> tuple[int, str]:
        """Type ``command``; its exit status and everything it printed (stdout and stderr)."""
        assert self.proc.stdin is not None
        marker = f"__done_{uuid.uuid4().hex}__"
        self.proc.stdin.write(f"{command}\necho {marker} $?\n")
        self.proc.stdin.flush()
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{command!r} still running after {timeout:.0f}s") from None
            if marker in line:  # after the output's last line, or its unended tail
                tail, status = line.split(marker)
                return int(status), "".join(out) + tail
            out.append(line)

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


@dataclass
class Report:
    title: str
    seconds: float
    output: str = ""
    gaps: list[str] = field(default_factory=list)


@dataclass
class Reader:
    """What the reader carries from step to step: the app's address, the key, the last id."""

    port: int
    workdir: Path
    values: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def typed(self, command: str) -> str:
        command = command.replace(f"127.0.0.1:{PAGE_PORT}", f"127.0.0.1:{self.port}")
        command = re.sub(r"\bapproval-worker serve\b", f"approval-worker serve --port {self.port}",
                         command)  # fmt: skip
        command = command.replace(TUTORIAL_DIR, shlex.quote(str(self.workdir)))
        command = re.sub(r"^uv sync$", "uv sync --locked --offline", command)
        if "<id>" in command:
            command = command.replace("<id>", self.values["id"])
        return command

    def seen(self, output: str) -> None:
        for name, pattern in (("id", r"paused on interrupt (\S+)"), ("key", r"^(aw_\S+)$")):
            found = re.findall(pattern, output, re.M)
            if found:
                self.values[name] = found[-1]

    def expected(self, text: str) -> str:
        return text.replace(f"127.0.0.1:{PAGE_PORT}", f"127.0.0.1:{self.port}")


Shot = Callable[[Any], None]


def _sign_in(page: Any, reader: Reader, step: Step, shot: Shot) -> None:
    link = re.search(r"<http://127\.0\.0\.1:\d+(/[^>]*)>", step.body)
    assert link, f"step {step.title!r}: no link to the inbox to open"
    page.goto(reader.url + link.group(1))
    page.fill("#credential", reader.values["key"])
    page.click("#sign-in")
    page.wait_for_url(reader.url + link.group(1))


def _approve_with_change(page: Any, reader: Reader, step: Step, shot: Shot) -> None:
    amount = re.search(r"set \*\*Amount\*\* to `([^`]+)`", step.body)
    assert amount, f"step {step.title!r}: no amount to set"
    page.click("text=Refund EUR")
    page.click("#edit-summary-0")  # Change values...
    page.fill("#a0-amount", amount.group(1))
    shot(page)
    page.click("#approve-edit-0")
    page.wait_for_load_state()


BROWSER_STEPS = (_sign_in, _approve_with_change)


def follow(workdir: Path, port: int, browser: Any, shots: Path | None = None) -> list[Report]:
    """Follow the tutorial in ``workdir`` (fresh; the reader's ``~/approval-tutorial``) with
    the app on ``port``; write its screenshots in ``shots`` if given. A report per step, with
    the lines of its "you should see" blocks that did not show."""
    env = {k: v for k, v in os.environ.items() if k not in settings_to_clear()}
    env.update(USER=USER, LOGNAME=USER, PYTHONUNBUFFERED="1")
    env.pop("VIRTUAL_ENV", None)  # the page activates the environment itself
    reader = Reader(port, workdir)
    shell = Shell(ROOT, env)
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    browser_steps = list(BROWSER_STEPS)
    reports = []
    try:
        for step in steps():
            started = time.monotonic()
            report = Report(step.title, 0.0)
            images = step.images()

            def shot(p: Any, images: list[str] = images) -> None:
                name = images.pop(0)
                if shots is not None:
                    p.screenshot(path=str(shots / name), full_page=True)

            if step.browser:
                assert browser_steps, f"no browser action for step {step.title!r}"
                browser_steps.pop(0)(page, reader, step, shot)
                for block in (b for b in step.blocks if b.kind == "text"):
                    want = reader.expected(block.text)
                    until(lambda w=want: _page_shows(page, w), f"the page to show {want!r}")
                page.wait_for_load_state()
                while images:
                    shot(page)
                report.output = page.inner_text("body")
            else:
                _type(step, shell, reader, report)
            report.seconds = time.monotonic() - started
            reports.append(report)
        assert not browser_steps, "a browser action no step of the page asks for"
    finally:
        context.close()
        shell.close()
    return reports


def _type(step: Step, shell: Shell, reader: Reader, report: Report) -> None:
    """Type each shell block of ``step``; a block's output is held to the text block after it.
    A read (the history, a list) is typed again until it shows what the page says: the app
    resumes in the background, as it does while a reader types."""
    blocks = step.blocks
    for i, block in enumerate(blocks):
        if block.kind != "sh":
            continue
        after = next((b for b in blocks[i + 1 :] if b.kind in ("sh", "text")), None)
        want = reader.expected(after.text) if after and after.kind == "text" else ""
        output = ""
        lines = commands(block.text)
        for n, command in enumerate(lines):
            typed = reader.typed(command)
            rc, out = shell.run(typed)
            assert rc == 0, f"step {step.title!r}: {typed!r} exited {rc}:\n{out}"
            reader.seen(out)
            output += out
            if n == len(lines) - 1 and " --history " in command and want:
                output = _read_until(shell, typed, want, output)
        report.output += output
        report.gaps += missing(want, output) if want else []


def _read_until(shell: Shell, typed: str, want: str, output: str) -> str:
    """``output`` of a read, typed again until it shows ``want`` (or the deadline passes)."""
    got = [output]

    def shows() -> bool:
        if not missing(want, got[-1]):
            return True
        got.append(shell.run(typed)[1])
        return False

    until(shows, f"{typed!r} to show {want!r}", timeout=60)
    return got[-1]


def _page_shows(page: Any, want: str) -> bool:
    from playwright.sync_api import Error as PlaywrightError

    try:  # the page refreshes itself while the run is active
        return not missing(want, page.inner_text("body"))
    except PlaywrightError:  # caught between two loads
        return False
