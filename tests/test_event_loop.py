"""Nothing blocks the event loop: while five page decisions and an operator's Retry each resume
a graph that sleeps 2 s (``FAULTS=resume.start=sleep:2``), ``GET /healthz`` on the same single
uvicorn process keeps answering. Both ways a page decision resumes: after its response (a
background task) and inline within the resume budget (serverless mode).

No duration is asserted (the bench's ``loop`` section has the figures). The proof is an order
on one clock: for every resume, some ``/healthz`` call was sent after the resume was taken up
and answered before it finished. A resume on the event loop would hold every request from its
take-up to its end, so no call could fit inside it.
"""

from __future__ import annotations

import pytest
from conftest import fresh_database

from store.db import open_store
from store.runs import RunStore
from store.states import Event
from testkit.databases import pointed_at
from testkit.loop import set_scene, slow_resumes
from testkit.webapp import start_server, worker_env

SLEEP = 2.0


def resume_spans(db_env: dict[str, str], thread_ids: list[str]) -> dict[str, tuple[float, float]]:
    """Each run's resume on the trail: from its take-up to the event that ended it."""
    spans = {}
    with pointed_at(db_env), open_store() as store:
        for thread_id in thread_ids:
            events = RunStore(store.db).events(thread_id)
            [taken] = [i for i, e in enumerate(events) if e.reason == Event.TAKEN_UP]
            spans[thread_id] = (events[taken].at, events[taken + 1].at)
    return spans


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
        resumed = [v["thread_id"] for v in scene.waiting] + [scene.failed]
        spans = resume_spans(db_env, resumed)
    assert window.replies[:5] == [202] * 5, window.replies  # applied (and resuming, or done)
    assert window.replies[5] == 303, window.replies  # the Retry: back to the list
    for thread_id, (taken, ended) in spans.items():
        assert ended - taken >= SLEEP, (thread_id, taken, ended)  # it really slept
        inside = [c for c in window.calls if taken < c[0] and c[1] < ended]
        assert inside, f"no /healthz answered during {thread_id}'s resume ({taken}..{ended})"
