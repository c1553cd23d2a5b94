"""The systemd recipe as systemd runs it: the checkout installed as the how-to says (``uv sync
--frozen --no-dev``, here with this machine's ``/usr/bin/python3``, readable by the service
user), then ``approval-webhook.service`` and ``approval-sweeper.service`` started with what each
unit declares: its ``ExecStart``, the ``EnvironmentFile`` (the how-to's copy of
``.env.example`` with the operator's values) and what systemd itself puts in a service's
environment, ``User=`` (an unprivileged uid: no ``approval`` account here), the
``WorkingDirectory`` / ``StateDirectory`` as the only writable path, ``ProtectSystem=strict``
(the root read-only), ``PrivateTmp`` and ``ProtectHome`` (empty tmpfs on ``/tmp``, ``/home``,
``/root``) and ``UMask``, in a mount namespace of its own. Not emulated: the system call filter,
the capability bounding set and ``PrivateTmp``'s ``/var/tmp`` (where this test keeps its
install); ``tests/test_deploy.py`` has ``systemd-analyze security`` check those."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT
from dotenv import dotenv_values

from testkit.databases import settings_to_clear
from testkit.recipes import answers, confined, deliver_and_scrape, stop
from testkit.servers import LOCAL_SECRET, free_port
from testkit.wait import until

UNITS = ROOT / "deploy" / "systemd"
HOWTO = ROOT / "docs" / "how-to" / "systemd.md"
SRV, STATE, ETC_ENV = "/srv/approval-worker", "/var/lib/approval-worker", "/etc/approval-worker/env"
SERVICE_USER = (61000, 61000)  # `useradd --system approval` would give some such ids
METRICS_TOKEN = "scrape-token-for-the-recipe-test"
pytestmark = pytest.mark.build


def service(name: str) -> dict[str, str]:
    """The ``[Service]`` section of a unit (every key here is given once)."""
    section, out = None, {}
    for line in (UNITS / name).read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            assert key not in out, key
            out[key] = value
    return out


@pytest.fixture(scope="module")
def install() -> Iterator[Path]:
    """``/srv/approval-worker``: the tracked files, synced as the how-to's line says."""
    base = Path(tempfile.mkdtemp(prefix="aw-systemd-", dir="/var/tmp"))  # outside /tmp
    base.chmod(0o755)
    srv = base / "srv"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (srv / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, srv / rel)
    [sync] = [ln for ln in HOWTO.read_text().splitlines() if ln.startswith("sudo uv sync")]
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", *settings_to_clear()}}
    env = {k: v for k, v in env.items() if not k.startswith("UV_")}
    env.update(UV_PYTHON="/usr/bin/python3", UV_PYTHON_DOWNLOADS="0", UV_LINK_MODE="copy")
    done = subprocess.run(shlex.split(sync)[1:], cwd=srv, env=env, timeout=600)
    assert done.returncode == 0, sync
    subprocess.run(["chmod", "-R", "go-w,o+rX", str(base)], check=True)  # root's, readable
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def started(unit: dict[str, str], base: Path, state: Path, env_file: Path, port: int, log: Path):
    """The unit's process, as systemd would start it."""
    assert unit["User"] == unit["Group"] == "approval"
    assert unit["WorkingDirectory"] == unit["ReadWritePaths"] == STATE
    assert unit["StateDirectory"] == "approval-worker" and unit["ProtectSystem"] == "strict"
    assert unit["PrivateTmp"] == unit["ProtectHome"] == "yes"
    assert unit["EnvironmentFile"] == f"-{ETC_ENV}"
    command = shlex.split(unit["ExecStart"].replace(SRV, str(base / "srv")))
    command = [str(port) if a == "8000" else a for a in command]
    env = {  # what systemd sets for a system service, then the EnvironmentFile
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
        "USER": "approval",
        "LOGNAME": "approval",
        "HOME": str(state),
        "SHELL": "/usr/sbin/nologin",
        "INVOCATION_ID": os.urandom(16).hex(),
        "JOURNAL_STREAM": "8:4242",
        "STATE_DIRECTORY": str(state),
        "SYSTEMD_EXEC_PID": "1",
    }
    runtime = base / "run"  # RuntimeDirectory=: /run/approval-worker, the user's, writable
    if "RuntimeDirectory" in unit:
        assert unit["RuntimeDirectory"] == "approval-worker"
        runtime.mkdir(exist_ok=True)
        os.chown(runtime, *SERVICE_USER)
    if "Environment" in unit:  # one KEY=value here; the EnvironmentFile wins over it
        key, _, value = unit["Environment"].partition("=")
        env[key] = value.replace("/run/approval-worker", str(runtime))
    env.update({k: v for k, v in dotenv_values(env_file).items() if v is not None})
    umask = unit["UMask"].removeprefix("0")
    cmd = confined(
        command,
        user=SERVICE_USER,
        writable=(state, runtime) if runtime.exists() else (state,),
        tmpfs=("/tmp", "/home", "/root"),
        umask=umask,
    )
    out = open(log, "w")  # noqa: SIM115 - until stopped
    return subprocess.Popen(cmd, cwd=state, env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_units_answer_a_signed_delivery_and_a_scrape(install: Path, runner):
    base = install
    state = base / "state"  # StateDirectory=: made by systemd, owned by the service user
    state.mkdir(exist_ok=True)
    os.chown(state, *SERVICE_USER)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env_file = base / "env"  # the how-to: a copy of .env.example, then the operator's values
    operator = {
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "WEBHOOK_SECRET": LOCAL_SECRET,
        "METRICS_TOKEN": METRICS_TOKEN,
        "LOG_FORMAT": "json",
    }
    env_file.write_text(
        (ROOT / ".env.example").read_text()
        + "".join(f"{k}={shlex.quote(v)}\n" for k, v in operator.items())
    )
    env_file.chmod(0o600)  # `install -d -m 700`: read by systemd (root), not by the service
    logs = {name: base / f"{name}.log" for name in ("webhook", "sweeper")}
    procs = {
        name: started(service(f"approval-{name}.service"), base, state, env_file, port, log)
        for name, log in logs.items()
    }
    try:
        until(lambda: answers(f"{url}/readyz", procs["webhook"]), "the unit's app is ready", 180)
        auth = {"authorization": f"Bearer {METRICS_TOKEN}"}
        deliver_and_scrape(runner, url, LOCAL_SECRET, "t-systemd", **auth)
        assert procs["sweeper"].poll() is None, logs["sweeper"].read_text()[-3000:]
    finally:
        codes = {name: stop(p) for name, p in procs.items()}
    assert codes["webhook"] in (0, -15), logs["webhook"].read_text()[-3000:]
    assert codes["sweeper"] == 0, logs["sweeper"].read_text()[-3000:]
    assert list(state.iterdir()) == []  # DATABASE_URL set: nothing written, not even there
    for log in logs.values():  # LOG_FORMAT=json: every line a record
        for line in log.read_text().splitlines():
            json.loads(line)
