"""Nothing blocks the event loop: while five page decisions and an operator's Retry each resume
a graph that sleeps 2 s (``FAULTS=resume.start=sleep:2``), ``GET /healthz`` on the same single
uvicorn process keeps answering. Both ways a page decision resumes: after its response (a
background task) and inline within the resume budget (serverless mode).

The bound is generous so a loaded two-core machine cannot trip it (the bench's ``loop`` section
has the real figures); a resume on the loop would stall a call for the whole 2 s sleep.
"""

from __future__ import annotations

import pytest
from conftest import fresh_database
from servers import start_server, worker_env

from testkit.loop import set_scene, slow_resumes

SLEEP = 2.0
BOUND = 0.5  # seconds: healthz takes milliseconds; a blocked loop makes it wait SLEEP or more


@pytest.mark.parametrize("serverless", ["0", "1"], ids=["background", "serverless"])
def test_healthz_answers_while_page_decisions_and_a_retry_resume(tmp_path, serverless):
    with fresh_database("sqlite", tmp_path, None) as db_env:
        env = worker_env(
            db_env,
            FAULTS=f"resume.start=sleep:{SLEEP:g}",
            SERVERLESS=serverless,
            RESUME_BUDGET_SECONDS="10",
        )
        server = start_server(env, tmp_path / "uvicorn.log")
        try:
            scene = set_scene(server.url, db_env, decisions=5, tag=f"s{serverless}")
            window = slow_resumes(scene)
        finally:
            server.stop()
    assert window.replies[:5] == [202] * 5, window.replies  # applied (and resuming, or done)
    assert window.replies[5] == 303, window.replies  # the Retry: back to the list
    assert window.seconds >= SLEEP  # the resumes really slept inside the window
    assert len(window.healthz) >= 10, window
    slowest = max(window.healthz)
    worst = ", ".join(f"{x:.3f}" for x in sorted(window.healthz)[-3:])
    assert slowest < BOUND, f"/healthz took up to {worst} s of {len(window.healthz)} calls"
