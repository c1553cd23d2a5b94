"""LangGraph's own clients decide through the one decision path: ``langgraph-sdk``'s sync and
async clients, unmodified, against a real uvicorn app on 127.0.0.1, list the waiting runs as
interrupted threads, read one with its interrupt and resume it; refusals change no table."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import httpx
import pytest
from conftest import ROOT, fresh_database, settings_to_clear
from langgraph_sdk import get_client, get_sync_client

from agent.ledger import Ledger
from store.db import open_store
from testkit import loopback
from testkit.wait import past
from testkit.webapp import Server, api_key, start_server, wait_for_status, worker_env
from worker.runner import Runner

# A-1002 (329.00) and A-1004 (540.00) need two approvers; A-1001 and A-1005 one
POLICY = {"SEPARATION_OF_DUTIES": "1", "REFUND_QUORUM_AMOUNT": "300", "REFUND_QUORUM": "2"}
PLAIN = "examples.plain_interrupts:ship_order"


@dataclass
class App:
    server: Server
    db_env: dict[str, str]
    keys: dict[str, str]  # name -> raw API key

    @property
    def lg(self) -> str:
        return f"{self.server.url}/lg"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def app(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"lg-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with fresh_database(request.param, tmp, pg) as db_env:
        server = start_server(worker_env(db_env, **POLICY), tmp / "uvicorn.log")
        roles = {"bob": "reviewer", "carol": "reviewer", "rita": "requester", "vic": "requester"}
        keys = {
            name: api_key(db_env, name, role)["authorization"].split()[1]
            for name, role in roles.items()
        }
        keys["rita reviews"] = api_key(db_env, "rita", "reviewer")["authorization"].split()[1]
        yield App(server, db_env, keys)
        server.stop()


@pytest.fixture
def runner(app, monkeypatch, tmp_path):
    for name in settings_to_clear():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    for name, value in {**app.db_env, **POLICY}.items():
        monkeypatch.setenv(name, value)
    with open_store() as store:
        Ledger(store.db).clear()
        yield Runner(store)


def waiting(runner: Runner, thread_id: str, order: str = "A-1005", by: str = "rita", **kw):
    outcome = runner.start(
        f"Refund order {order}: arrived broken", thread_id=thread_id, requested_by=by, **kw
    )
    assert outcome.status == "waiting", outcome
    return runner.runs.get(thread_id)


def tables(runner: Runner, thread_id: str) -> tuple:
    db = runner.store.db
    return tuple(
        db.all(f"SELECT * FROM {table} WHERE thread_id = :t", {"t": thread_id})  # noqa: S608
        for table in ("runs", "run_events", "run_approvals", "run_answers")
    )


def refused(call, status: int, code: str) -> str:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        call()
    response = caught.value.response
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code, response.text
    return response.json()["error"]["message"]


def test_the_sync_client_lists_reads_and_approves_a_waiting_run_exactly_once(app, runner):
    run = waiting(runner, "t-lg-sync")
    client = get_sync_client(url=app.lg, api_key=app.keys["bob"], timeout=30)

    found = client.threads.search(status="interrupted", limit=100)
    [thread] = [t for t in found if t["thread_id"] == "t-lg-sync"]
    assert all(t["status"] == "interrupted" for t in found)
    [(task_id, [pending])] = thread["interrupts"].items()
    assert pending["id"] == run.graph_interrupt_ids[0]  # the graph's own interrupt and id
    [action] = pending["value"]["action_requests"]  # the payload the graph passed to interrupt()
    assert action["name"] == "issue_refund" and action["args"]["order_id"] == "A-1005"
    assert pending["value"]["review_configs"][0]["allowed_decisions"] == [
        "approve",
        "edit",
        "reject",
    ]
    assert thread["values"]["messages"][0]["content"].startswith("Refund order A-1005")
    approval = thread["metadata"]["approval"]  # the product's fields ride in metadata
    assert approval["digest"] == run.request_digest and approval["interrupt_id"] == run.interrupt_id
    assert thread["metadata"]["status"] == "waiting" and thread["metadata"]["graph_id"] == "refund"
    assert client.threads.get("t-lg-sync")["interrupts"] == thread["interrupts"]
    state = client.threads.get_state("t-lg-sync")
    assert state["interrupts"] == [pending] and state["tasks"][0]["interrupts"] == [pending]
    assert state["tasks"][0]["id"] == task_id and state["next"] == [state["tasks"][0]["name"]]

    accept = [{"type": "accept", "args": None}]
    before = tables(runner, "t-lg-sync")
    # carol never read the request: a resume naming none could approve what she never saw
    carol = get_sync_client(url=app.lg, api_key=app.keys["carol"], timeout=30)
    message = refused(
        lambda: carol.runs.create("t-lg-sync", "refund", command={"resume": accept}),
        409,
        "stale",
    )
    assert "read the thread first" in message
    assert tables(runner, "t-lg-sync") == before

    # bob read it (search, get, get_state): his resume answers the request he read
    resumed = client.runs.create("t-lg-sync", "refund", command={"resume": accept})
    assert resumed["status"] == "pending" and resumed["thread_id"] == "t-lg-sync"
    assert resumed["run_id"] not in (run.interrupt_id, pending["id"])  # a run's own id
    values = client.runs.join("t-lg-sync", resumed["run_id"])
    assert values["messages"][-1]["content"].startswith("Refunded"), values
    assert client.runs.get("t-lg-sync", resumed["run_id"])["status"] == "success"
    assert client.threads.get("t-lg-sync")["status"] == "idle"
    assert "t-lg-sync" not in [t["thread_id"] for t in client.threads.search(status="interrupted")]

    again = lambda: client.runs.create("t-lg-sync", "refund", command={"resume": accept})  # noqa: E731
    assert "a LangGraph client" in refused(again, 409, "decided")
    assert [r["run_id"] for r in client.runs.list("t-lg-sync")] == [resumed["run_id"]]
    assert len(Ledger(runner.store.db).refunds("t-lg-sync")) == 1
    claim = runner.runs.last_claim("t-lg-sync")
    assert claim.detail["approvers"] == ["bob"] and claim.detail["source"] == "langgraph"


def test_the_async_client_resumes_with_an_edit_and_stale_requests_are_refused(app, runner):
    run = waiting(runner, "t-lg-async")

    async def decide() -> dict:
        async with get_client(url=app.lg, api_key=app.keys["carol"], timeout=30) as client:
            found = await client.threads.search(status="interrupted", limit=100)
            assert "t-lg-async" in [t["thread_id"] for t in found]
            state = await client.threads.get_state("t-lg-async")
            [pending] = state["interrupts"]
            digest = state["metadata"]["approval"]["digest"]
            args = {**pending["value"]["action_requests"][0]["args"], "amount": 1.0}
            edit = [{"type": "edit", "args": {"action": "issue_refund", "args": args}}]
            # another request's id, a wrong digest, a checkpoint that disagrees: refused
            with pytest.raises(httpx.HTTPStatusError) as other:
                await client.runs.wait("t-lg-async", "refund", command={"resume": {"0" * 32: edit}})
            assert other.value.response.json()["error"]["code"] == "other_interrupt"
            with pytest.raises(httpx.HTTPStatusError) as stale:
                hitl = {"decisions": [{"type": "approve"}], "digest": "0" * 32}
                await client.runs.wait("t-lg-async", "refund", command={"resume": hitl})
            assert stale.value.response.status_code == 409
            assert stale.value.response.json()["error"]["code"] == "stale"
            with pytest.raises(httpx.HTTPStatusError) as mixed:
                await client.runs.wait(
                    "t-lg-async",
                    "refund",
                    command={"resume": {pending["id"]: edit}},
                    checkpoint_id="0" * 32,
                )
            assert mixed.value.response.status_code == 422
            assert (await client.threads.get("t-lg-async"))["status"] == "interrupted"
            return await client.runs.wait(
                "t-lg-async",
                "refund",
                command={"resume": {pending["id"]: edit}},
                checkpoint_id=state["checkpoint"]["checkpoint_id"],
            ) | {"_digest": digest}

    before = tables(runner, "t-lg-async")
    values = asyncio.run(decide())
    assert values["_digest"] == run.request_digest
    assert values["messages"][-1]["content"].startswith("Refunded 1.00"), values
    [refund] = Ledger(runner.store.db).refunds("t-lg-async")
    assert refund["amount_cents"] == 100
    assert tables(runner, "t-lg-async")[0] != before[0]  # the run moved once: done


def test_keys_roles_and_visibility(app, runner):
    waiting(runner, "t-lg-rita", order="A-1004", by="rita")
    waiting(runner, "t-lg-vic", order="A-1001", by="vic")
    rita = get_sync_client(url=app.lg, api_key=app.keys["rita"], timeout=30)
    mine = rita.threads.search(status="interrupted", limit=100)
    assert {t["thread_id"] for t in mine} == {"t-lg-rita"}  # a requester sees their own
    assert refused(lambda: rita.threads.get("t-lg-vic"), 404, "unknown_run")
    pending = rita.threads.get_state("t-lg-rita")["interrupts"][0]
    before = tables(runner, "t-lg-rita")
    resume = {"resume": {pending["id"]: [{"type": "accept", "args": None}]}}
    assert "reviewer" in refused(
        lambda: rita.runs.create("t-lg-rita", "refund", command=resume), 403, "forbidden"
    )
    nobody = get_sync_client(url=app.lg, api_key=None, timeout=30)
    refused(lambda: nobody.threads.search(status="interrupted"), 401, "unauthorized")
    wrong = get_sync_client(url=app.lg, api_key="aw_not_a_real_key_at_all", timeout=30)
    refused(lambda: wrong.threads.get("t-lg-rita"), 401, "unauthorized")
    bob = get_sync_client(url=app.lg, api_key=app.keys["bob"], timeout=30)
    assert "requester" in refused(lambda: bob.threads.create(), 403, "forbidden")
    again = {"messages": [{"role": "user", "content": "Refund order A-1004 again"}]}
    refused(lambda: rita.runs.create("t-lg-rita", "refund", input=again), 409, "thread_has_run")
    refused(lambda: bob.threads.search(values={"a": 1}), 404, "unsupported")
    refused(lambda: bob.crons.create("refund", schedule="* * * * *"), 404, "unsupported")
    modes = {"stream_mode": "debug", "command": resume}
    refused(lambda: list(bob.runs.stream("t-lg-rita", "refund", **modes)), 404, "unsupported")
    assert tables(runner, "t-lg-rita") == before
    assert bob.runs.list("t-lg-rita") == []  # nothing refused left a run behind
    said = loopback.get(f"{app.lg}/info", headers={"x-api-key": app.keys["bob"]}).json()
    assert said["flags"] == {"assistants": True, "crons": False, "langsmith": False}
    assert loopback.get(f"{app.lg}/info").status_code == 401  # a credential, as on every route
    # x-api-key is only read under /lg: the run API wants its bearer credential
    outside = loopback.get(
        f"{app.server.url}/runs/t-lg-rita", headers={"x-api-key": app.keys["bob"]}
    )
    assert outside.status_code == 401


def test_an_agent_inbox_response_answers_a_plain_interrupt(app, runner):
    outcome = runner.start(
        "Order 1042, 3 chairs", thread_id="t-lg-plain", workflow=PLAIN, requested_by="rita"
    )
    assert outcome.status == "waiting", outcome
    bob = get_sync_client(url=app.lg, api_key=app.keys["bob"], timeout=30)
    [pending] = bob.threads.get_state("t-lg-plain")["interrupts"]
    assert pending["value"]["question"] == "Ship the order?"  # the graph's own payload
    # LangGraph's own resume by id: Command(resume={interrupt id: value})
    values = bob.runs.wait(
        "t-lg-plain", "ship", command={"resume": {pending["id"]: "yes, by Friday"}}
    )
    assert "__interrupt__" not in values, values
    assert "ship: yes, by Friday" in runner.runs.get("t-lg-plain").result


def test_quorum_duties_and_the_deadline_apply_as_on_every_source(app, runner):
    waiting(runner, "t-lg-quorum", order="A-1002", by="rita")
    clients = {
        who: get_sync_client(url=app.lg, api_key=app.keys[who], timeout=30)
        for who in ("bob", "carol", "rita reviews")
    }
    [pending] = clients["bob"].threads.get_state("t-lg-quorum")["interrupts"]
    resume = {"resume": {pending["id"]: [{"type": "accept", "args": None}]}}
    first = clients["bob"].runs.create("t-lg-quorum", "refund", command=resume)
    assert first["status"] == "pending", first
    assert first["metadata"]["approvers"] == ["bob"] and first["metadata"]["quorum"] == 2
    assert "__interrupt__" in clients["bob"].runs.join("t-lg-quorum", first["run_id"])
    assert clients["bob"].threads.get("t-lg-quorum")["status"] == "interrupted"
    before = tables(runner, "t-lg-quorum")
    own = lambda: clients["rita reviews"].runs.create(  # noqa: E731
        "t-lg-quorum", "refund", command=resume
    )
    refused(own, 403, "duties")  # the requester, though a reviewer too
    twice = lambda: clients["bob"].runs.wait("t-lg-quorum", "refund", command=resume)  # noqa: E731
    refused(twice, 409, "repeated")
    assert tables(runner, "t-lg-quorum") == before
    values = clients["carol"].runs.wait("t-lg-quorum", "refund", command=resume)
    assert values["messages"][-1]["content"].startswith("Refunded"), values
    assert len(Ledger(runner.store.db).refunds("t-lg-quorum")) == 1
    assert runner.runs.last_claim("t-lg-quorum").detail["approvers"] == ["bob", "carol"]

    late = waiting(runner, "t-lg-late", order="A-1001", expires_in=1)
    past((late.expires_at or 0) + 0.1, "the request's deadline, judged by the server's clock")
    before = tables(runner, "t-lg-late")
    resume = {"resume": {late.interrupt_id: [{"type": "accept", "args": None}]}}
    expired = lambda: clients["bob"].runs.create("t-lg-late", "refund", command=resume)  # noqa: E731
    refused(expired, 410, "expired")
    assert tables(runner, "t-lg-late") == before


def test_hitl_decisions_with_the_digest_and_an_ignore_that_rejects(app, runner):
    first = waiting(runner, "t-lg-hitl", order="A-1005")
    second = waiting(runner, "t-lg-ignore", order="A-1001")
    bob = get_sync_client(url=app.lg, api_key=app.keys["bob"], timeout=30)
    mine = bob.threads.search(status="interrupted", metadata={"graph_id": first.workflow})
    assert {"t-lg-hitl", "t-lg-ignore"} <= {t["thread_id"] for t in mine}
    assert bob.threads.search(status="interrupted", metadata={"graph_id": "no-such"}) == []
    digest = bob.threads.get("t-lg-hitl")["metadata"]["approval"]["digest"]
    hitl = {"decisions": [{"type": "approve"}], "digest": digest}
    values = bob.runs.wait("t-lg-hitl", "refund", command={"resume": hitl})
    assert values["messages"][-1]["content"].startswith("Refunded"), values
    [pending] = bob.threads.get_state("t-lg-ignore")["interrupts"]
    ignore = {pending["id"]: [{"type": "ignore", "args": None}]}
    values = bob.runs.wait("t-lg-ignore", "refund", command={"resume": ignore})
    assert not values["messages"][-1]["content"].startswith("Refunded"), values
    assert runner.runs.get("t-lg-ignore").status == "done"
    decided = runner.runs.last_claim("t-lg-ignore").detail["decision"]
    assert decided == {"decisions": [{"type": "reject"}]}
    assert Ledger(runner.store.db).refunds("t-lg-ignore") == []
    assert second.graph_interrupt_ids == [pending["id"]]


def test_the_documented_snippet_runs(app, runner):
    waiting(runner, "t-lg-docs", order="A-1001")
    text = (ROOT / "docs" / "channels.md").read_text()
    section = text[text.index("## LangGraph clients") :]
    [snippet] = re.findall(r"```python\n(.*?)```", section, re.S)[:1]
    env = {
        **os.environ,
        "APPROVAL_WORKER_URL": app.server.url,
        "LANGGRAPH_API_KEY": app.keys["bob"],
        "THREAD_ID": "t-lg-docs",
    }
    done = subprocess.run(
        [sys.executable, "-c", snippet], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "t-lg-docs issue_refund" in done.stdout and done.stdout.strip().endswith("done")
    wait_for_status(app.server.url, "t-lg-docs", "done")
    assert len(Ledger(runner.store.db).refunds("t-lg-docs")) == 1
