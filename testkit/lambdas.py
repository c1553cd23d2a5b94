"""The Lambda entry points as AWS calls them: one cold process per invocation, fed AWS's own
event shapes from ``tests/events``, reporting the handler's answer, which heavy modules it
loaded and whether the garbage collector is on again (``core.coldstart``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from testkit.databases import ROOT
from testkit.servers import LOCAL_SECRET, SECRET

EVENTS = ROOT / "tests" / "events"
HEAVY = ("langgraph", "langchain", "langchain_core", "anthropic")

# Runs in the child: build the event, call the handler once, report the answer and what loaded.
CHILD = """
import json, sys
spec = json.loads(sys.argv[1])
event = json.load(open(spec["event"]))
event.setdefault("headers", {}).update(spec["headers"])
if spec.get("body") is not None:
    event["body"] = spec["body"]
    event["headers"]["content-length"] = str(len(spec["body"].encode()))
if spec.get("method"):
    event["requestContext"]["http"]["method"] = spec["method"]
if spec.get("path"):
    event["rawPath"] = event["requestContext"]["http"]["path"] = spec["path"]
import lambda_handler
answer = getattr(lambda_handler, spec["entry"])(event, None)
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(spec["heavy"]))
import gc
print(json.dumps({"answer": answer, "heavy": heavy, "collecting": gc.isenabled()}))
"""


def invoke(
    entry: str,
    event: str,
    body: str | None = None,
    headers=None,
    path=None,
    method=None,
    **env: str,
) -> dict:
    """Call ``lambda_handler.<entry>`` in a new process with the test's database settings."""
    spec = {"entry": entry, "event": str(EVENTS / event), "body": body, "headers": headers or {}}
    spec.update(heavy=list(HEAVY), path=path, method=method)
    child_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WEBHOOK_SECRET": LOCAL_SECRET,
        "VIGILATOR_WEBHOOK_SECRET": SECRET,
        "AWS_LAMBDA_FUNCTION_NAME": "approval-worker-http",  # what Lambda sets
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
