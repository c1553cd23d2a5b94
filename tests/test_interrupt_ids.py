"""Answers addressed by LangGraph's interrupt id: a ``Send`` fan-out pauses on four plain
interrupts at once, and each is answered by a different source naming its interrupt id (a
signed webhook's item, a LangGraph client's ``Command(resume={id: value})`` on ``/lg``, the
inbox CLI's ``answer --interrupt``, the API's decisions keyed by id); the run resumes with all
of them once the last arrives. Positions
stay the short form. On both backends, over real HTTP to the app served in this process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from api.app import create_app
from inbox.__main__ import _decisions, _parser
from inbox.hitl import HitlRequest
from store.keys import KeyStore, parse_groups, parse_roles
from testkit.databases import TEST_RATE_LIMITS, environment, fresh_database
from testkit.servers import LOCAL_SECRET, serve_app, svix_headers
from testkit.wait import until
from worker.cli import answer_request
from worker.decisions import Pending
from worker.runner import Runner

FAN_OUT = "examples.plain_interrupts:fan_out"


@dataclass
class Site:
    url: str
    runner: Runner
    keys: dict[str, str]  # name -> raw API key


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp(f"ids-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with fresh_database(request.param, tmp, pg) as db_env:
        with environment({**db_env, **TEST_RATE_LIMITS, "WEBHOOK_SECRET": LOCAL_SECRET}):
            app = create_app()
            with serve_app(app) as url:
                runner: Runner = app.state.runner
                store = KeyStore(runner.store.db)
                keys = {}
                for name in ("bob", "carol"):
                    _, token = store.create(name, parse_roles(["reviewer"]), parse_groups(()), None)
                    keys[name] = token
                yield Site(url, runner, keys)


def _ids(run) -> dict[str, str]:
    """item -> the LangGraph interrupt id of the question asking about it."""
    return {
        a["interrupt"]["value"].split()[1]: a["interrupt"]["id"]
        for a in run.request["action_requests"]
    }


def _webhook(site: Site, run, interrupt_id: str, text: str, who: str) -> httpx.Response:
    item = {
        "interruptId": interrupt_id,
        "name": "check_item",
        "decision": "respond",
        "responseText": text,
        "decidedByName": who,
    }
    data = {
        "id": run.interrupt_id,
        "externalId": f"approval-worker:{run.thread_id}",
        "actionRequests": [item],
    }
    body = json.dumps({"type": "interrupt.answered", "data": data})
    headers = svix_headers(body, secret=LOCAL_SECRET, msg_id=f"msg_ids_{run.thread_id}")
    return httpx.post(f"{site.url}/webhooks/local", content=body, headers=headers, timeout=30)


def test_three_parallel_interrupts_answered_by_id_through_three_sources(site):
    thread_id = "t-ids-three"
    outcome = site.runner.start("a, b, c, d", thread_id=thread_id, workflow=FAN_OUT)
    assert outcome.status == "waiting", outcome
    run = site.runner.runs.get(thread_id)
    ids = _ids(run)
    assert sorted(ids) == ["a", "b", "c", "d"] and len(set(ids.values())) == 4

    reply = _webhook(site, run, ids["b"], "no", "bob")
    assert reply.json()["status"] == "approval recorded", reply.text
    lg = {"command": {"resume": {ids["a"]: "yes"}}, "assistant_id": FAN_OUT}
    reply = httpx.post(
        f"{site.url}/lg/threads/{thread_id}/runs",
        json=lg,
        headers={"x-api-key": site.keys["carol"]},
        timeout=30,
    )
    assert reply.status_code == 200 and reply.json()["status"] == "pending", reply.text
    answered = site.runner.decisions.answers.list(thread_id, run.interrupt_id)
    assert {a.position: a.decision["value"] for a in answered.values()} == {
        [*ids].index("a"): "yes",
        [*ids].index("b"): "no",
    }

    command = ["answer", run.interrupt_id, "--interrupt", ids["d"], "--value", "maybe"]
    decide = lambda request: _decisions(_parser().parse_args(command), HitlRequest.parse(request))  # noqa: E731
    assert isinstance(answer_request(site.runner, run.interrupt_id, decide, "carol"), Pending)

    body = {
        "interrupt_id": run.interrupt_id,
        "digest": run.request_digest,
        "decisions": {ids["c"]: {"type": "answer", "value": "later"}},
    }
    headers = {"authorization": f"Bearer {site.keys['bob']}"}
    url = f"{site.url}/runs/{thread_id}/decision"
    reply = httpx.post(url, json=body, headers=headers, timeout=30)
    assert reply.status_code == 202 and reply.json()["status"] == "accepted", reply.text
    until(lambda: site.runner.runs.get(thread_id).status == "done", "the run's end")
    graph = site.runner.graph(FAN_OUT)
    values = graph.get_state({"configurable": {"thread_id": thread_id}}).values
    assert sorted(values["answers"]) == ["a: yes", "b: no", "c: later", "d: maybe"]


def test_an_unknown_interrupt_id_is_refused_and_changes_nothing(site):
    thread_id = "t-ids-unknown"
    site.runner.start("a, b", thread_id=thread_id, workflow=FAN_OUT)
    run = site.runner.runs.get(thread_id)
    events = site.runner.runs.events(thread_id)
    body = {
        "interrupt_id": run.interrupt_id,
        "digest": run.request_digest,
        "decisions": {"f" * 32: {"type": "answer", "value": "x"}},
    }
    headers = {"authorization": f"Bearer {site.keys['bob']}"}
    url = f"{site.url}/runs/{thread_id}/decision"
    reply = httpx.post(url, json=body, headers=headers, timeout=30)
    assert reply.status_code == 422 and reply.json()["error"]["code"] == "invalid", reply.text
    assert "no pending interrupt" in reply.json()["error"]["message"]
    reply = _webhook(site, run, "f" * 32, "x", "bob")
    assert reply.json()["code"] == "invalid", reply.text
    assert site.runner.runs.events(thread_id) == events
    assert site.runner.decisions.answers.list(thread_id, run.interrupt_id) == {}
