"""Section 7: cold start of the Lambda HTTP handler, each invocation a new process.

A function pays import and set-up on every cold start. A delivery the worker ignores (here a
redelivered ``interrupt.answered`` for a finished run, signed, through an API Gateway v2 event)
must cost about what a FastAPI app costs to import: the floor is ``python -c "import fastapi"``,
target within 1.5x. A delivery that resumes a run to done inside the invocation is compared
with ``import langgraph.graph``, the least any LangGraph program pays. Measured like section 5
(interleaved, wall and peak RSS per child), on SQLite in serverless mode.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.cold import _once
from bench.common import ROOT, SECRET, Figure, Section, child_env, median
from testkit.databases import environment
from testkit.servers import svix_headers

EVENT = ROOT / "tests" / "events" / "apigw_v2_http_api.json"
TARGETS = {
    "ignored delivery": ("import fastapi", 1.5),
    "resumed delivery": ("import langgraph.graph", 1.5),
}

CHILD = """
import json, sys
event = json.load(open(sys.argv[1]))
import lambda_handler
answer = lambda_handler.handler(event, None)
assert answer["statusCode"] == 200, answer
assert json.loads(answer["body"])["status"] == sys.argv[2], answer
"""


def _event(work: Path, name: str, body: str, msg_id: str) -> Path:
    event = json.loads(EVENT.read_text())
    event["body"] = body
    event["headers"].update(svix_headers(body, secret=SECRET, msg_id=msg_id))
    event["headers"]["content-length"] = str(len(body.encode()))
    path = work / f"{name}.json"
    path.write_text(json.dumps(event))
    return path


def _answered(interrupt_id: str, thread_id: str) -> str:
    item = {"name": "issue_refund", "decision": "approve", "decidedByName": "bench"}
    data = {"id": interrupt_id, "externalId": f"approval-worker:{thread_id}"}
    return json.dumps({"type": "interrupt.answered", "data": {**data, "actionRequests": [item]}})


def _clear_books(env: dict[str, str]) -> None:
    """Every resumed delivery refunds order A-1001 in full; the order's books start over
    before each one, untimed, or the second would be refused as more than is refundable."""
    from agent.ledger import Ledger
    from store.db import open_store

    with environment(env), open_store() as store:
        Ledger(store.db).clear()


def measure(tmp: Path, reps: int) -> Section:
    section = Section("lambda")
    work = tmp / "lambda"
    work.mkdir(exist_ok=True)
    env = child_env({"SQLITE_PATH": str(work / "lambda.db")}, AWS_LAMBDA_FUNCTION_NAME="bench")
    with environment(env):  # this process configured as the handler's children are
        from worker.runner import open_runner

        with open_runner() as runner:  # the runs the deliveries answer, set up beforehand
            waiting = []
            for i in range(reps + 2):
                outcome = runner.start("Refund order A-1001: arrived broken", thread_id=f"l{i}")
                waiting.append((outcome.interrupt_id, f"l{i}"))
    py = sys.executable
    # the first run is resumed once up front: its redelivery is the ignored one
    first = _event(work, "first", _answered(*waiting[0]), "msg_first")
    _once([py, "-c", CHILD, str(first), "done"], env, work)
    ignored = _event(work, "ignored", _answered(*waiting[0]), "msg_first")
    cmds = {
        "import fastapi": lambda i: [py, "-c", "import fastapi"],
        "import langgraph.graph": lambda i: [py, "-c", "import langgraph.graph"],
        "ignored delivery": lambda i: [py, "-c", CHILD, str(ignored), "ignored"],
        "resumed delivery": lambda i: [
            py,
            "-c",
            CHILD,
            str(_event(work, f"r{i}", _answered(*waiting[i + 1]), f"msg_{i}")),
            "done",
        ],
    }
    for name in ("import fastapi", "import langgraph.graph", "ignored delivery"):
        _once(cmds[name](0), env, work)  # warm the page cache and the .pyc files
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    names = list(cmds)
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            if name == "resumed delivery":
                _clear_books(env)
            samples[name].append(_once(cmds[name](rep), env, work))
    for name, (floor_name, target) in TARGETS.items():
        for what, index, unit in (("wall", 0, "s"), ("peak RSS", 1, "MiB")):
            value = median([s[index] for s in samples[name]])
            floor = median([s[index] for s in samples[floor_name]])
            ratio = value / floor
            section.figures.append(
                Figure(
                    "lambda",
                    f"handler cold start, {name}, {what}",
                    value,
                    floor,
                    unit,
                    ratio,
                    f"<= {target}x",
                    ratio <= target,
                    f"floor: {floor_name}; SQLite, SERVERLESS on",
                )
            )
    for name, values in samples.items():
        section.details.append(
            f"- {name}: {reps} reps; wall {', '.join(f'{w:.2f}' for w, _ in values)} s; "
            f"peak RSS {', '.join(f'{m:.0f}' for _, m in values)} MiB"
        )
    return section
