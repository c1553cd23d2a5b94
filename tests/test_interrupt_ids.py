"""Answers addressed by LangGraph's interrupt id: a ``Send`` fan-out pauses on four plain
interrupts at once, and each is answered by a different source naming its interrupt id (a
signed webhook's item, a LangGraph client's ``Command(resume={id: value})`` on ``/lg``, the
inbox CLI's ``answer --interrupt``, the API's decisions keyed by id); the run resumes with all
of them once the last arrives. Positions stay the short form: the web page (driven in
chromium) answers the question it shows. A ``resume_each`` graph, resumed as each question is
answered, keeps its request page and its history readable at every step. On both backends,
over real HTTP to the app served in this process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from api.app import create_app
from inbox.__main__ import _decisions, _parser
from store.history import history, history_lines
from store.keys import KeyStore, parse_groups, parse_roles
from testkit import loopback
from testkit.databases import TEST_RATE_LIMITS, environment, fresh_database
from testkit.servers import LOCAL_SECRET, serve_app, svix_headers
from testkit.wait import until
from worker.cli import OK, answer_request, recover
from worker.decisions import Pending
from worker.runner import Runner

FAN_OUT = "examples.plain_interrupts:fan_out"
EACH = "examples.plain_interrupts:parallel_each"


DESK = [("dora", ["reviewer", "operator"])]  # answers on the page, and reads the history


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
                for name, roles in (("bob", ["reviewer"]), ("carol", ["reviewer"]), *DESK):
                    _, token = store.create(name, parse_roles(roles), parse_groups(()), None)
                    keys[name] = token
                yield Site(url, runner, keys)


def _ids(run) -> dict[str, str]:
    """item -> the LangGraph interrupt id of the question asking about it."""
    return {
        a["interrupt"]["value"].split()[1]: a["interrupt"]["id"]
        for a in run.request.to_json()["action_requests"]
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
    return loopback.post(f"{site.url}/webhooks/local", content=body, headers=headers, timeout=30)


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
    reply = loopback.post(
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
    decide = lambda request: _decisions(_parser().parse_args(command), request)  # noqa: E731
    assert isinstance(answer_request(site.runner, run.interrupt_id, decide, "carol"), Pending)

    body = {
        "interrupt_id": run.interrupt_id,
        "digest": run.request_digest,
        "decisions": {ids["c"]: {"type": "answer", "value": "later"}},
    }
    headers = {"authorization": f"Bearer {site.keys['bob']}"}
    url = f"{site.url}/runs/{thread_id}/decision"
    reply = loopback.post(url, json=body, headers=headers, timeout=30)
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
    reply = loopback.post(url, json=body, headers=headers, timeout=30)
    assert reply.status_code == 422 and reply.json()["error"]["code"] == "invalid", reply.text
    assert "no pending interrupt" in reply.json()["error"]["message"]
    reply = _webhook(site, run, "f" * 32, "x", "bob")
    assert reply.json()["code"] == "invalid", reply.text
    assert site.runner.runs.events(thread_id) == events
    assert site.runner.decisions.answers.list(thread_id, run.interrupt_id) == {}


# -- the web page, in chromium -------------------------------------------------------------


def signed_in(browser, site: Site, who: str):
    """A browser context signed in to the web inbox with ``who``'s key; its page."""
    page = browser.new_context().new_page()
    page.goto(f"{site.url}/inbox/login")
    page.fill("#credential", site.keys[who])
    page.click("#sign-in")
    page.wait_for_url(lambda url: "/inbox/login" not in url)
    return page


def shown(page, site: Site, thread_id: str):
    """The request page as a reviewer opens it: it must render (never a 500)."""
    reply = page.goto(f"{site.url}/inbox/requests/{thread_id}")
    assert reply is not None and reply.status == 200, reply and reply.status
    return page


def answer_on_page(page, position: int, text: str) -> int:
    """Type the answer under the question at ``position`` and press its Answer button; the
    status the page's answer came with."""
    page.fill(f"#answer-{position}-text", text)
    with (
        page.expect_navigation(),
        page.expect_response(lambda r: r.request.method == "POST") as posted,
    ):
        page.click(f"#submit-answer-{position}")
    return posted.value.status


def test_three_parallel_interrupts_answered_by_webhook_lg_by_id_and_the_page(site, browser):
    thread_id = "t-ids-page"
    outcome = site.runner.start("a, b, c", thread_id=thread_id, workflow=FAN_OUT)
    assert outcome.status == "waiting", outcome
    run = site.runner.runs.get(thread_id)
    ids = _ids(run)
    assert sorted(ids) == ["a", "b", "c"]

    reply = _webhook(site, run, ids["a"], "no", "bob")
    assert reply.json()["status"] == "approval recorded", reply.text
    lg = {"command": {"resume": {ids["b"]: "yes"}}, "assistant_id": FAN_OUT}
    reply = loopback.post(
        f"{site.url}/lg/threads/{thread_id}/runs",
        json=lg,
        headers={"x-api-key": site.keys["carol"]},
        timeout=30,
    )
    assert reply.status_code == 200 and reply.json()["status"] == "pending", reply.text

    page = shown(signed_in(browser, site, "dora"), site, thread_id)
    c = [*ids].index("c")
    for item, who, said in (("a", "bob", "no"), ("b", "carol", "yes")):
        answered = page.locator(f"#answered-{[*ids].index(item)}").inner_text()
        assert answered == f"Answered by {who}: {said}", answered
    assert answer_on_page(page, c, "later") == 202
    assert "Decision applied" in page.locator(".outcome").inner_text()
    until(lambda: site.runner.runs.get(thread_id).status == "done", "the run's end")
    values = site.runner.graph(FAN_OUT).get_state({"configurable": {"thread_id": thread_id}})
    assert sorted(values.values["answers"]) == ["a: no", "b: yes", "c: later"]
    page.context.close()


def readable(site: Site, page, thread_id: str, capsys) -> list[str]:
    """The request page, the history API and ``recover --history`` all render the run: its
    history lines, as the command prints them."""
    shown(page, site, thread_id)
    headers = {"authorization": f"Bearer {site.keys['dora']}"}
    api = loopback.get(f"{site.url}/runs/{thread_id}/history", headers=headers, timeout=30)
    assert api.status_code == 200, api.text
    capsys.readouterr()
    assert recover(history=thread_id) == OK
    printed = capsys.readouterr().out.splitlines()
    assert printed == history_lines(history(site.runner.store.db, thread_id))
    return printed


def test_a_resume_each_run_answered_in_parts_reads_at_every_step(site, browser, capsys):
    """legal and finance pause at once; the run resumes as each is answered (finance runs on,
    legal asks again in a request of its own). Its page and history render at every step."""
    thread_id = "t-each-page"
    outcome = site.runner.start("Launch", thread_id=thread_id, workflow=EACH)
    assert outcome.status == "waiting", outcome
    page = signed_in(browser, site, "dora")
    readable(site, page, thread_id, capsys)
    first = site.runner.runs.get(thread_id)
    finance = [a["interrupt"]["node"] for a in first.request.to_json()["action_requests"]].index(
        "finance"
    )

    # claims at once, with a null for legal's question: the page answers, the run resumes
    assert answer_on_page(page, finance, "approved") == 202
    assert "Decision applied" in page.locator(".outcome").inner_text()
    until(lambda: site.runner.runs.get(thread_id).status == "waiting", "legal's question again")
    again = site.runner.runs.get(thread_id)
    assert again.interrupt_id != first.interrupt_id
    assert [a["interrupt"]["node"] for a in again.request.to_json()["action_requests"]] == ["legal"]
    lines = readable(site, page, thread_id, capsys)
    assert any("left for later" in line for line in lines), lines

    assert answer_on_page(page, 0, "fine") == 202
    until(lambda: site.runner.runs.get(thread_id).status == "done", "the run's end")
    lines = readable(site, page, thread_id, capsys)
    assert any('answer: "fine"' in line for line in lines), lines
    values = site.runner.graph(EACH).get_state({"configurable": {"thread_id": thread_id}})
    assert sorted(values.values["answers"]) == ["finance: approved", "legal: fine"]
    page.context.close()
