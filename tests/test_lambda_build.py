"""The SAM template's documented build, performed: the export line its header gives, then
``sam build``'s own builder (aws-lambda-builders, the python_pip workflow) on the template's
``CodeUri``, then the byte compile; the built bundle is then invoked, in a process that sees
nothing but the bundle and the standard library, with AWS's event shapes.

The limit here: Lambda runs Python 3.12 and this machine has 3.11, so the bundle is built for
the interpreter that is here (the template and the docs say 3.12); the steps are the same.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from testkit.decide import answer
from testkit.lambdas import CHILD, EVENTS
from testkit.recipes import confined
from testkit.servers import svix_headers
from testkit.webapp import LOCAL_SECRET
from worker.runner import Runner

TEMPLATE = ROOT / "deploy" / "aws" / "template.yaml"
RUNTIME = f"python{sys.version_info.major}.{sys.version_info.minor}"
# the base interpreter (not this venv's): the bundle alone must be enough
BASE_PYTHON = shutil.which(RUNTIME, path="/usr/bin") or sys.executable
LAMBDA_USER = (993, 990)  # Lambda runs a function as an unprivileged sbx_user


def documented(step: str) -> str:
    [line] = [ln for ln in TEMPLATE.read_text().splitlines() if ln.startswith(f"#   {step}")]
    return line.removeprefix("#   ")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Iterator[Path]:
    from aws_lambda_builders.builder import LambdaBuilder

    # outside /tmp: the recipe test gives the function an empty tmpfs there, as Lambda does
    base = Path(tempfile.mkdtemp(prefix="aw-sam-", dir="/var/tmp"))
    base.chmod(0o755)
    checkout, out, scratch = base / "checkout", base / "build", base / "scratch"
    # a developer's checkout, with its local state: none of it may reach the bundle
    skip = shutil.ignore_patterns(".venv", ".git", "node_modules", "__pycache__", ".*_cache")
    shutil.copytree(ROOT, checkout, ignore=skip)
    (checkout / "approvals.db").write_bytes(b"runs, decisions and key digests")
    (checkout / ".env").write_text("DATABASE_URL=postgresql://app:secret@127.0.0.1/prod\n")

    stage = shlex.split(documented("python3 deploy/aws/stage.py"), comments=True)
    done = subprocess.run([sys.executable, *stage[1:]], cwd=checkout, timeout=120)
    assert done.returncode == 0
    export = shlex.split(documented("uv export"))
    assert export[:2] == ["uv", "export"] and "--no-dev" in export
    done = subprocess.run(export, cwd=checkout, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    manifest = checkout / export[export.index("-o") + 1]
    template = yaml.safe_load(TEMPLATE.read_text())
    # sam build resolves CodeUri from the template's folder and copies it whole
    code_uri = (checkout / "deploy" / "aws" / template["Globals"]["Function"]["CodeUri"]).resolve()
    assert manifest.parent == code_uri
    source = code_uri
    assert "fastapi" in manifest.read_text() and "pytest" not in manifest.read_text()

    assert documented("sam build").startswith("sam build -t deploy/aws/template.yaml")
    builder = LambdaBuilder(language="python", dependency_manager="pip", application_framework=None)
    # the builder runs pip once per package: skip pip's own version check each time
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    builder.build(str(source), str(out), str(scratch), str(manifest), runtime=RUNTIME)

    compile_step = documented("python3.12 -m compileall")
    assert "-m compileall -q" in compile_step
    done = subprocess.run([BASE_PYTHON, "-m", "compileall", "-q", str(out)], timeout=600)
    assert done.returncode == 0
    subprocess.run(["chmod", "-R", "go-w,o+rX", str(base)], check=True)  # /var/task: read-only
    try:
        yield out
    finally:
        shutil.rmtree(base, ignore_errors=True)


def call(
    bundle: Path, entry: str, event: str, env: dict[str, str] | None = None, **spec_extra
) -> dict:
    """Invoke ``lambda_handler.<entry>`` from the bundle alone: ``-I -S`` (no site-packages,
    no PYTHONPATH), the bundle first on ``sys.path``."""
    spec = {"entry": entry, "event": str(EVENTS / event), "headers": {}, "heavy": []}
    spec.update({"body": None, "path": None, "method": None, **spec_extra})
    if isinstance(spec.get("event_json"), dict):
        custom = bundle.parent / "event.json"
        custom.write_text(json.dumps(spec.pop("event_json")))
        spec["event"] = str(custom)
    child = f"import sys; sys.path.insert(0, {str(bundle)!r})\n" + CHILD
    command = [BASE_PYTHON, "-I", "-S", "-c", child, json.dumps(spec)]
    if env is not None:  # the recipe's: Lambda's sandbox, read-only but /tmp, a non-root user
        command = confined(command, user=LAMBDA_USER)
    env = env or {
        **{k: v for k, v in os.environ.items() if k in ("SQLITE_PATH", "DATABASE_URL", "PATH")},
        "WEBHOOK_SECRET": LOCAL_SECRET,
        "AWS_LAMBDA_FUNCTION_NAME": "approval-worker",
        "LOG_FORMAT": "json",
    }
    proc = subprocess.run(
        command,
        cwd=bundle,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in proc.stderr.splitlines():  # LOG_FORMAT=json: one object per line
        json.loads(line)
    return json.loads(proc.stdout.strip().splitlines()[-1])["answer"]


def test_the_bundle_holds_the_allow_list_and_no_local_state(bundle: Path):
    """Only the handler's packages and the dependencies: no database file, secrets, tests,
    docs or bench, whatever the checkout holds."""
    names = {p.name for p in bundle.iterdir()}
    assert not names & {"approvals.db", ".env", "tests", "testkit", "docs", "bench", "examples"}
    assert not list(bundle.rglob("*.db"))
    ours = {"lambda_handler.py", "api", "core", "store", "inbox", "ops", "worker", "agent"}
    assert ours <= names
    assert not names & {"approval_worker", "deploy", "run.py", "recover.py", "webhook.py"}
    own = sum(p.stat().st_size for n in ours for p in [bundle / n, *(bundle / n).rglob("*")])
    assert own < 10 * 1024 * 1024  # the project's part; the dependencies are the rest
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    assert size < 250 * 1024 * 1024  # Lambda's limit is 262 MB unzipped


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_built_bundle_answers_real_events(bundle: Path, runner: Runner):
    assert (bundle / "lambda_handler.py").exists() and (bundle / "fastapi").is_dir()
    assert list((bundle / "core" / "__pycache__").glob("*.pyc"))  # byte-compiled
    assert not list(bundle.glob("pytest*")) and not list(bundle.glob("mypy*"))  # no dev group

    health = call(bundle, "handler", "apigw_v2_http_api.json", path="/healthz", method="GET")
    assert health["statusCode"] == 200, health
    assert re.match(r"\d+\.\d+", json.loads(health["body"])["version"])

    created = call(
        bundle,
        "scheduled",
        "eventbridge_schedule.json",
        event_json={"create_key": {"name": "first-admin", "roles": ["admin"]}},
    )
    assert created["roles"] == ["admin"] and created["key"], created
    admin = {"authorization": f"Bearer {created['key']}"}
    keys = call(
        bundle, "handler", "apigw_v2_http_api.json", path="/keys", method="GET", headers=admin
    )
    assert keys["statusCode"] == 200, keys
    assert [k["name"] for k in json.loads(keys["body"])] == ["first-admin"]

    paused = runner.start("Refund order A-1001: arrived broken", thread_id="t-bundle")
    answer(runner, paused.interrupt_id, [{"type": "approve"}], "alice")
    template = yaml.safe_load(TEMPLATE.read_text())
    schedule = template["Resources"]["SweepFunction"]["Properties"]["Events"]["EveryMinute"]
    event = json.loads((EVENTS / "eventbridge_schedule.json").read_text())
    event.update(json.loads(schedule["Properties"]["Input"]))  # what the rule sends
    swept = call(bundle, "scheduled", "eventbridge_schedule.json", event_json=event)
    assert swept["threads"] == {"done": ["t-bundle"]}, swept
    assert runner.runs.get("t-bundle").status == "done"


def template_env(function: str) -> dict[str, str]:
    """What Lambda gives the template's ``function``: the Globals' variables with the stack
    deployed as ``Inbox=local`` (``Fn::If`` resolved, ``AWS::NoValue`` dropped, the Secrets
    Manager references resolved to this test's database and secret), then the runtime's own."""
    template = yaml.safe_load(TEMPLATE.read_text())
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    secrets = {"DATABASE_URL": os.environ["DATABASE_URL"], "WEBHOOK_SECRET": LOCAL_SECRET}
    env: dict[str, str] = {}
    for name, value in variables.items():
        if isinstance(value, dict) and "Fn::If" in value:
            value = value["Fn::If"][2]  # the condition UseVigilator is false
        if value == {"Ref": "AWS::NoValue"}:
            continue
        if value == {"Ref": "Inbox"}:
            value = "local"
        elif isinstance(value, dict):
            assert "resolve:secretsmanager" in value["Fn::Sub"], value
            value = secrets[name]
        env[name] = str(value)
    assert set(secrets) <= set(env)
    env.update(  # the runtime's (docs.aws.amazon.com: defined runtime environment variables)
        AWS_LAMBDA_FUNCTION_NAME=f"approval-worker-{function}",
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE=str(template["Globals"]["Function"]["MemorySize"]),
        AWS_LAMBDA_FUNCTION_VERSION="$LATEST",
        AWS_REGION="eu-west-1",
        AWS_DEFAULT_REGION="eu-west-1",
        AWS_EXECUTION_ENV="AWS_Lambda_python3.12",
        LAMBDA_TASK_ROOT="/var/task",
        LAMBDA_RUNTIME_DIR="/var/runtime",
        _HANDLER=template["Resources"][function]["Properties"]["Handler"],
        TZ=":UTC",
        LANG="en_US.UTF-8",
        PATH="/var/lang/bin:/usr/local/bin:/usr/bin/:/bin:/opt/bin",
    )
    return env


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_template_s_functions_answer_a_signed_delivery_and_a_scrape(bundle: Path, runner):
    """The HTTP function and the sweep function as the template declares them (its variables,
    Lambda's own, the bundle as a read-only working directory, only /tmp writable, a non-root
    user), on Postgres: a signed delivery resumes a run to done, the scheduled sweep answers,
    and a scrape gets the template's answer (no ``METRICS_TOKEN`` in it: metrics are off)."""
    http, sweep = template_env("HttpFunction"), template_env("SweepFunction")
    paused = runner.start("Refund order A-1001: arrived broken", thread_id="t-sam")
    body = json.dumps(
        {
            "type": "interrupt.answered",
            "data": {
                "id": paused.interrupt_id,
                "externalId": "approval-worker:t-sam",
                "actionRequests": [{"name": "issue_refund", "decision": "approve"}],
            },
        }
    )
    signed = svix_headers(body, secret=LOCAL_SECRET, msg_id="msg_sam_1")
    event = "apigw_v2_http_api.json"
    delivered = call(
        bundle, "handler", event, http, path="/webhooks/local", method="POST", body=body,
        headers=signed,
    )  # fmt: skip
    # resumed within RESUME_BUDGET_SECONDS: 200 done; past it, 202 and the sweep finishes it
    assert delivered["statusCode"] in (200, 202), delivered
    template = yaml.safe_load(TEMPLATE.read_text())
    schedule = template["Resources"]["SweepFunction"]["Properties"]["Events"]["EveryMinute"]
    tick = json.loads((EVENTS / "eventbridge_schedule.json").read_text())
    tick.update(json.loads(schedule["Properties"]["Input"]))
    swept = call(bundle, "scheduled", "eventbridge_schedule.json", sweep, event_json=tick)
    assert "threads" in swept, swept
    assert runner.runs.get("t-sam").status == "done"  # resumed in the request or the sweep
    scrape = call(bundle, "handler", event, http, path="/metrics", method="GET")
    assert scrape["statusCode"] == 404 and "METRICS_TOKEN" in scrape["body"], scrape
