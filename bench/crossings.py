"""``uv run python -m bench.crossings``: how many of the product's modules one signed webhook
delivery runs code in, from its arrival to its run's ``done`` (issue 32 asks for the number).

Every thread is profiled (the request's, the resumer's, the resume's), in one process on a
scratch SQLite database, after one warm-up delivery so module imports are not counted. A
module counts once, whatever it calls; the agent's graph (``agent/``) is listed apart.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from testkit.servers import LOCAL_SECRET, SECRET, svix_headers

ROOT = Path(__file__).resolve().parent.parent
OURS = ("tests", "testkit", "bench", ".venv")


def _delivery(interrupt_id: str, thread_id: str) -> str:
    item = {"name": "issue_refund", "decision": "approve", "decidedByName": "alice"}
    data = {"id": interrupt_id, "externalId": f"approval-worker:{thread_id}",
            "status": "answered", "actionRequests": [item]}  # fmt: skip
    return json.dumps({"type": "interrupt.answered", "data": data})


def crossings() -> dict[str, set[str]]:
    """Each product module run while a delivery is carried to ``done``: the threads it ran on."""
    from fastapi.testclient import TestClient

    from api.app import create_app

    counting = threading.Event()
    seen: dict[str, set[str]] = defaultdict(set)

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event != "call" or not counting.is_set():
            return
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(ROOT) and path.relative_to(ROOT).parts[0] not in OURS:
            seen[str(path.relative_to(ROOT))].add(threading.current_thread().name)

    threading.setprofile(profile)  # every thread started from here: the app's are, below
    sys.setprofile(profile)
    app = create_app()
    with TestClient(app) as client:
        runner = app.state.runner
        for thread_id, order, count in (("t-warm", "A-1001", False), ("t-count", "A-1002", True)):
            out = runner.start(f"Refund order {order}: arrived broken", thread_id=thread_id)
            body = _delivery(out.interrupt_id or "", thread_id)
            if count:
                counting.set()
            signed = svix_headers(body, secret=SECRET, msg_id=thread_id)
            reply = client.post("/webhooks/vigilator", content=body, headers=signed)
            assert reply.status_code == 202, reply.text
            deadline = time.monotonic() + 60
            while runner.runs.get(thread_id).status != "done":
                assert time.monotonic() < deadline, f"{thread_id} not done in 60 s"
                time.sleep(0.01)  # polls until the run is done (deadline above)
            counting.clear()
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]
    return {m: names for m, names in seen.items() if names - {"MainThread"}}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update({"SQLITE_PATH": f"{tmp}/crossings.db", "WEBHOOK_SECRET": LOCAL_SECRET,
                           "VIGILATOR_WEBHOOK_SECRET": SECRET, "LOG_LEVEL": "WARNING"})  # fmt: skip
        os.environ.pop("DATABASE_URL", None)
        found = crossings()
    product = sorted(m for m in found if not m.startswith("agent/"))
    graph = sorted(m for m in found if m.startswith("agent/"))
    for module in product + graph:
        print(f"{module}  ({', '.join(sorted(found[module]))})")
    print(f"webhook -> done crosses {len(product)} product modules (+{len(graph)} of the agent's)")


if __name__ == "__main__":
    main()
