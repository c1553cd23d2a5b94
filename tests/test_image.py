"""The Dockerfile, built without a container engine: each instruction is replayed here, in a
fresh directory, and the result is run as the image runs it.

The builder stage's ``RUN`` lines run as written (their cache and bind mounts emulated: the
files a bind mount would show are copied in first, and uv's own cache is reused); ``COPY .``
honours ``.dockerignore``. The runtime stage's user is ``nobody`` (setpriv), the install is
owned by root so it is read-only to that user, and the working directory is an empty one. The
interpreter is this machine's ``/usr/bin/python3`` (3.11) where the image has 3.12: the one
difference left.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import ROOT

from testkit import loopback
from testkit.databases import settings_to_clear
from testkit.recipes import answers, confined, deliver_and_scrape, image_env, stop
from testkit.servers import LOCAL_SECRET, SECRET, free_port
from testkit.wait import until

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
DEMO = "Refund order A-1001: the kettle arrived broken"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instr, args in instructions(text):
        if instr == "FROM":
            found.append([])
        found[-1].append((instr, args))
    return found


def ignored(rel: str, patterns: list[str]) -> bool:
    """``.dockerignore``'s rule: the last matching pattern wins; ``!`` re-includes."""
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!")
        names = [pattern, pattern.removeprefix("**/")]
        parts = rel.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        hit = any(fnmatch.fnmatch(p, n) for p in prefixes for n in names)
        if not hit and pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(part, names[1]) for part in parts)
        if hit:
            result = not negate
    return result


def copy_context(dst: Path) -> None:
    patterns = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        rel_dir = here.relative_to(ROOT).as_posix()
        prefix = "" if rel_dir == "." else f"{rel_dir}/"
        rel = prefix.__add__
        dirs[:] = [d for d in dirs if not ignored(rel(d), patterns)]
        for name in files:
            if not ignored(rel(name), patterns):
                target = dst / rel(name)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(here / name, target)


def env_of(args: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in shlex.split(args))


def clean_env() -> dict[str, str]:
    drop = {*settings_to_clear(), "VIRTUAL_ENV", "USER", "LOGNAME", "PYTHONPATH"}
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("UV_")}


def build(dst: Path, tools: Path) -> dict[str, str]:
    """Replay both stages into ``dst``; return the runtime stage's environment."""
    builder, runtime = stages((ROOT / "Dockerfile").read_text())
    (tools / "python").symlink_to(SYSTEM_PYTHON)  # the image's `python`
    env = {**clean_env(), "UV_PYTHON": SYSTEM_PYTHON}
    env["PATH"] = f"{tools}:{env['PATH']}"
    for instr, args in builder:
        if instr == "ENV":
            env.update(env_of(args))
        elif instr == "WORKDIR":
            assert args == "/app"
        elif instr == "COPY" and args.startswith("--from="):
            assert "astral-sh/uv" in args  # uv itself: this machine's
        elif instr == "COPY":
            assert args == ". /app", args
            copy_context(dst)
        elif instr == "RUN":
            words = args.split(" ")
            for mount in (w for w in words if w.startswith("--mount=")):
                opts = dict(o.split("=", 1) for o in mount.removeprefix("--mount=").split(","))
                if opts["type"] == "bind":
                    shutil.copy2(ROOT / opts["source"], dst / opts["target"])
            command = " ".join(w for w in words if not w.startswith("--mount="))
            done = subprocess.run(["sh", "-c", command], cwd=dst, env=env, timeout=600)
            assert done.returncode == 0, command
    for path in [dst, *dst.rglob("*")]:  # root-owned, world-readable: read-only to the app
        path.chmod(path.stat().st_mode & ~(stat.S_IWGRP | stat.S_IWOTH))
    run_env = clean_env()
    run_env.pop("HOME", None)
    for instr, args in runtime:
        if instr == "ENV":
            values = env_of(args.replace("$PATH", run_env["PATH"]))
            run_env.update({k: v.replace("/app", str(dst)) for k, v in values.items()})
        elif instr == "COPY":
            assert args == "--from=builder /app /app"
        elif instr == "USER":
            assert not args.startswith("0") and args != "root"
    return run_env


def snapshot(root: Path) -> set[tuple[str, float]]:
    return {(str(p), p.stat().st_mtime) for p in root.rglob("*") if ".venv" not in p.parts}


@pytest.fixture(scope="module")
def image() -> Iterator[tuple[Path, dict[str, str]]]:
    # outside /tmp: the recipe test mounts an empty tmpfs there, as `--tmpfs /tmp` does
    base = Path(tempfile.mkdtemp(prefix="aw-image-", dir="/var/tmp"))
    base.chmod(0o755)
    dst, tools = base / "app", base / "tools"
    dst.mkdir()
    tools.mkdir()
    try:
        yield dst, build(dst, tools)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_app_user(cmd: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *cmd]


@pytest.fixture
def workdir() -> Iterator[Path]:
    """The image's /data: empty, the app user's."""
    path = Path(tempfile.mkdtemp(prefix="aw-data-"))
    os.chown(path, NOBODY, NOBODY)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def command(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        as_app_user(["approval-worker", *args]),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_image_has_what_it_runs(image):
    dst, env = image
    assert not (dst / "tests").exists() and not (dst / ".git").exists()
    assert not (dst / ".env").exists()
    assert (dst / ".venv" / "bin" / "approval-worker").exists()
    installed = subprocess.run(
        [str(dst / ".venv" / "bin" / "python"), "-m", "pip", "--version"], capture_output=True
    )
    assert installed.returncode != 0  # no pip, and no dev group:
    for dev in ("pytest", "mypy", "ruff", "playwright"):
        assert not list((dst / ".venv").glob(f"lib/python*/site-packages/{dev}")), dev
    assert list((dst / "core").glob("__pycache__/settings*.pyc")) or list(
        (dst / "core" / "__pycache__").glob("*.pyc")
    )  # byte-compiled at build time


def test_demo_pauses_and_the_sweep_finishes_it(image, workdir):
    dst, env = image
    before = snapshot(dst)
    version = command(env, workdir, "--version")
    assert version.returncode == 0 and version.stdout.startswith("approval-worker 0."), version

    paused = command(env, workdir, "run", DEMO)
    assert paused.returncode == 0, paused.stderr
    # the image logs JSON (LOG_FORMAT=json): the result lines are records on stdout
    said = [json.loads(line)["message"] for line in paused.stdout.splitlines()]
    [pause] = [m for m in said if m.startswith("paused on interrupt ")]
    request_id = pause.split()[3]
    approved = command(env, workdir, "inbox", "approve", request_id, "--by", "alice")
    assert approved.returncode == 0, approved.stderr
    swept = command(env, workdir, "recover")
    assert swept.returncode == 0, swept.stderr
    assert "Refunded 49.90 EUR for order A-1001" in swept.stdout
    assert snapshot(dst) == before  # the install was only read
    assert (workdir / "approvals.db").exists()


def test_the_image_command_serves_and_its_healthcheck_passes(image, workdir):
    dst, env = image
    runtime = stages((ROOT / "Dockerfile").read_text())[-1]
    [cmd] = [json.loads(a) for i, a in runtime if i == "CMD"]  # exec form
    [check] = [json.loads(a.split(" CMD ", 1)[1]) for i, a in runtime if i == "HEALTHCHECK"]
    port = str(free_port())
    cmd = [port if a == "8000" else "127.0.0.1" if a == "0.0.0.0" else a for a in cmd]
    server = subprocess.Popen(
        as_app_user(cmd),
        cwd=workdir,
        env={**env, "WEBHOOK_SECRET": SECRET},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.communicate()
            try:
                health = loopback.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.2)  # polls until the image's app answers (deadline above)
        assert health.status_code == 200 and health.json()["version"].startswith("0.")
        assert loopback.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
        probe = [a.replace(":8000/", f":{port}/") for a in check]
        probe_done = subprocess.run(as_app_user(probe), env=env, cwd=workdir, timeout=30)
        assert probe_done.returncode == 0
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
    for line in err.splitlines():  # LOG_FORMAT=json (the image's): every line is JSON
        json.loads(line)


def test_hadolint_passes_the_dockerfile():
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "hadolint"), str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def docker_runs() -> list[list[str]]:
    """The ``docker run -d`` commands of the Docker how-to, continuation lines joined."""
    text = (ROOT / "docs" / "how-to" / "docker.md").read_text().replace("\\\n", " ")
    return [shlex.split(ln) for ln in text.splitlines() if ln.startswith("docker run -d ")]


def container(argv: list[str], built: dict[str, str], port: int) -> tuple:
    """What ``docker run`` would start: the image's ENV (its /app mapped to the replayed
    image), the ``-e`` values (placeholders replaced by this test's), the image's USER and
    WORKDIR, a read-only root with each ``--tmpfs``; the command after the image name, or the
    image's CMD. Returns (argv to run, environment)."""
    runtime = stages((ROOT / "Dockerfile").read_text())[-1]
    words = argv[2:]
    flags: dict[str, list[str]] = {}
    while words[0].startswith("-"):
        flag = words.pop(0)
        if flag in ("--read-only", "--rm", "-d"):
            flags.setdefault(flag, [])
        else:
            flags.setdefault(flag, []).append(words.pop(0))
    image, command = words[0], words[1:]
    assert image == "approval-worker:0.2.0" and "--read-only" in flags, argv
    if not command:
        [command] = [json.loads(a) for i, a in runtime if i == "CMD"]
    command = [str(port) if a == "8000" else "127.0.0.1" if a == "0.0.0.0" else a for a in command]
    env = {k: built[k] for k in image_env()}  # the image's ENV, as built
    env.update(HOSTNAME="container", HOME="/nonexistent")
    ours = {
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "WEBHOOK_SECRET": LOCAL_SECRET,
        "METRICS_TOKEN": "scrape-token-for-the-recipe-test",
    }
    for pair in flags.get("-e", []):
        name, _, value = pair.partition("=")
        assert value, pair
        env[name] = ours[name]  # every -e the recipe declares is one this test gives
    [user] = [a for i, a in runtime if i == "USER"]
    uid, gid = (int(x) for x in user.split(":"))
    [workdir] = [a for i, a in runtime if i == "WORKDIR"]
    assert workdir == "/data"  # the image's empty directory: here image_dir/data, read-only
    tmpfs = tuple(flags.get("--tmpfs", []))
    assert tmpfs == ("/tmp",)
    return confined(command, user=(uid, gid), tmpfs=tmpfs), env


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_docker_recipe_answers_a_signed_delivery_and_a_scrape(image, runner):
    """The app and the sweeper started as the Docker how-to runs them (``--read-only --tmpfs
    /tmp``, the image's user, environment and working directory), on Postgres."""
    dst, built = image
    data = dst.parent / "data"  # the image's /data (made by the runtime stage's RUN)
    data.mkdir(exist_ok=True)
    os.chown(data, 10001, 10001)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    app_run, sweeper_run = docker_runs()
    logs = {}
    procs = []
    try:
        for name, argv in (("app", app_run), ("sweeper", sweeper_run)):
            cmd, env = container(argv, built, port)
            logs[name] = data.parent / f"{name}.log"
            out = open(logs[name], "w")  # noqa: SIM115 - until stopped
            procs.append(
                subprocess.Popen(cmd, cwd=data, env=env, stdout=out, stderr=subprocess.STDOUT)
            )
        app, sweeper = procs
        until(lambda: answers(f"{url}/readyz", app), "the container's app is ready", 120)
        token = "Bearer scrape-token-for-the-recipe-test"
        deliver_and_scrape(runner, url, LOCAL_SECRET, "t-docker", authorization=token)
        assert sweeper.poll() is None, logs["sweeper"].read_text()[-3000:]
    finally:
        codes = [stop(p) for p in procs]
    assert codes[0] in (0, -15), logs["app"].read_text()[-3000:]  # uvicorn re-raises SIGTERM
    assert codes[1] == 0, logs["sweeper"].read_text()[-3000:]
    assert list(data.iterdir()) == []  # a read-only root: nothing written
    for name in logs:  # LOG_FORMAT=json (the image's): every line a record
        for line in logs[name].read_text().splitlines():
            json.loads(line)
