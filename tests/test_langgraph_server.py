"""A drop-in LangGraph server: the same client script, unmodified, with the Python
``langgraph-sdk`` and the JavaScript ``@langchain/langgraph-sdk`` (from npm, pinned:
``testkit/langgraph_js.py``), against a real app on 127.0.0.1; Agent Inbox's own call
sequences acting on runs; a stream that outlives its server, joined again with
``Last-Event-ID``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import fresh_database, settings_to_clear
from langgraph_sdk import get_sync_client

from agent.ledger import Ledger
from store.db import open_store
from testkit.langgraph_js import run_script
from testkit.lg_client import client_script
from testkit.servers import kill_tree
from testkit.wait import past, until
from testkit.webapp import Server, api_key, start_server, worker_env
from worker.runner import Runner

POLICY = {"SEPARATION_OF_DUTIES": "1", "REFUND_QUORUM_AMOUNT": "300", "REFUND_QUORUM": "2"}
ASK = "Refund order A-1005: arrived broken"
PROGRESS = "testkit.lg_graphs:progress"  # a graph that reports progress with a stream writer


@dataclass
class App:
    server: Server
    db_env: dict[str, str]
    keys: dict[str, str]
    tmp: Path

    @property
    def lg(self) -> str:
        return f"{self.server.url}/lg"


@pytest.fixture(scope="module")
def app(tmp_path_factory, postgres_url):
    tmp = tmp_path_factory.mktemp("lg-server")
    with fresh_database("postgres", tmp, postgres_url) as db_env:
        env = worker_env(db_env, **POLICY, API_WORKFLOWS=PROGRESS)
        server = start_server(env, tmp / "uvicorn.log")
        roles = {"bob": "reviewer", "rita": "requester", "olga": "operator"}
        keys = {
            name: api_key(db_env, name, role)["authorization"].split()[1]
            for name, role in roles.items()
        }
        yield App(server, db_env, keys, tmp)
        server.stop()


@pytest.fixture
def runner(app, monkeypatch, tmp_path):
    for name in settings_to_clear():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    for name, value in {**app.db_env, **POLICY}.items():
        monkeypatch.setenv(name, value)
    with open_store() as store:
        Ledger(store.db).clear()  # every order refundable again
        yield Runner(store)


def without_ids(summary: dict) -> dict:
    """The summary with each run's own ids (interrupt, refund) taken out."""
    pending = {k: v for k, v in summary["interrupt"].items() if k != "id"}
    streamed = [{k: v for k, v in i.items() if k != "id"} for i in summary["streamed_interrupt"]]
    said = summary["last_message"].split(" (refund ")[0]
    return {**summary, "interrupt": pending, "streamed_interrupt": streamed, "last_message": said}


def test_the_same_client_script_runs_with_the_python_and_the_javascript_sdk(app, runner):
    python = client_script(app.lg, app.keys["rita"], app.keys["bob"], ASK)
    Ledger(runner.store.db).clear()  # the same order, refundable again
    keys = {"REQUESTER_KEY": app.keys["rita"], "REVIEWER_KEY": app.keys["bob"]}
    javascript = run_script("lg_client.mjs", {"LG_URL": app.lg, "TEXT": ASK, **keys})

    for summary in (python, javascript):
        assert summary["first_event"] == "metadata" and summary["run_id_first"]
        assert summary["started"] == ["metadata", "updates", "values"]
        pending = summary["interrupt"]
        [streamed] = summary["streamed_interrupt"]
        assert streamed == pending  # the stream's interrupt is the state's: payload and id
        [action] = pending["value"]["action_requests"]  # what the graph passed to interrupt()
        assert action["name"] == "issue_refund" and action["args"]["order_id"] == "A-1005"
        assert summary["last_message"].startswith("Refunded 199.99 EUR for order A-1005")
        assert summary["runs"] == ["success", "interrupted"]  # newest first
        assert summary["status"] == "idle" and summary["metadata_status"] == "done"
        assert summary["history"] >= 5 and summary["history_next"][0] == []
    assert python["interrupt"]["id"] != javascript["interrupt"]["id"]
    assert without_ids(python) == without_ids(javascript)


def test_a_graphs_own_stream_writer_reaches_the_client_as_custom_events(app, runner):
    rita = get_sync_client(url=app.lg, api_key=app.keys["rita"], timeout=60)
    bob = get_sync_client(url=app.lg, api_key=app.keys["bob"], timeout=60)
    [assistant] = rita.assistants.search(graph_id=PROGRESS)
    graph = rita.assistants.get_graph(assistant["assistant_id"])
    assert {n["id"] for n in graph["nodes"]} >= {"prepare", "confirm", "report"}
    thread_id = rita.threads.create()["thread_id"]
    given = {"messages": [{"role": "user", "content": "Order 1042, 3 chairs"}]}
    modes = ["custom", "updates"]
    started = list(rita.runs.stream(thread_id, PROGRESS, input=given, stream_mode=modes))
    custom = [p.data for p in started if p.event == "custom"]
    assert custom == [{"step": "checked stock"}, {"step": "priced"}]
    [paused] = [p.data["__interrupt__"] for p in started if "__interrupt__" in p.data]
    assert paused[0]["value"] == {"question": "Ship the order?", "order": "Order 1042, 3 chairs"}
    command = {"resume": {paused[0]["id"]: "yes, by Friday"}}
    resumed = list(bob.runs.stream(thread_id, PROGRESS, command=command, stream_mode="custom"))
    assert [p.event for p in resumed] == ["metadata", "custom"]
    assert resumed[1].data == {"answered": "yes, by Friday"}
    state = bob.threads.get_state(thread_id)
    assert state["values"]["answers"] == ["ship: yes, by Friday"] and state["next"] == []
    assert state["metadata"]["status"] == "done"
    assert [r["status"] for r in bob.runs.list(thread_id)] == ["success", "interrupted"]


def test_create_join_cancel_count_delete_and_schemas(app, runner):
    rita = get_sync_client(url=app.lg, api_key=app.keys["rita"], timeout=60)
    olga = get_sync_client(url=app.lg, api_key=app.keys["olga"], timeout=60)
    schemas = rita.assistants.get_schemas("refund")
    assert schemas["graph_id"] == "refund" and "properties" in schemas["input_schema"]
    empty = rita.threads.create()["thread_id"]
    assert rita.threads.get(empty)["status"] == "idle" and rita.threads.get_history(empty) == []
    rita.threads.delete(empty)  # a thread whose run never started goes
    with pytest.raises(httpx.HTTPStatusError) as gone:
        rita.threads.get(empty)
    assert gone.value.response.status_code == 404

    thread_id = rita.threads.create()["thread_id"]
    given = {"messages": [{"role": "user", "content": ASK}]}
    created = rita.runs.create(thread_id, "refund", input=given)
    assert created["status"] == "pending" and created["assistant_id"] != "refund"
    assert "__interrupt__" in rita.runs.join(thread_id, created["run_id"])
    assert rita.runs.get(thread_id, created["run_id"])["status"] == "interrupted"
    waiting = rita.threads.count(status="interrupted")
    assert waiting >= 1 and olga.threads.count(status="interrupted") >= waiting

    with pytest.raises(httpx.HTTPStatusError) as kept:
        olga.threads.delete(thread_id)  # a run keeps its audit trail
    assert kept.value.response.json()["error"]["code"] == "kept"
    with pytest.raises(httpx.HTTPStatusError) as not_an_operator:
        rita.runs.cancel(thread_id, created["run_id"])
    assert not_an_operator.value.response.status_code == 403
    olga.runs.cancel(thread_id, created["run_id"])
    thread = olga.threads.get(thread_id)
    assert thread["status"] == "idle" and thread["metadata"]["status"] == "cancelled"
    assert rita.threads.count(status="interrupted") == waiting - 1


def waiting(runner: Runner, thread_id: str, order: str) -> None:
    text = f"Refund order {order}: arrived broken"
    outcome = runner.start(text, thread_id=thread_id, requested_by="rita")
    assert outcome.status == "waiting", outcome


def inbox(app: App, thread_id: str, act: str, **extra: str) -> dict:
    env = {"LG_URL": app.lg, "REVIEWER_KEY": app.keys["bob"], "GRAPH_ID": "refund"}
    return run_script("agent_inbox.mjs", {**env, "THREAD_ID": thread_id, "ACT": act, **extra})


def test_agent_inbox_accepts_edits_responds_ignores_and_resolves(app, runner):
    for thread_id, order in [
        ("t-inbox-accept", "A-1005"),
        ("t-inbox-edit", "A-1001"),
        ("t-inbox-respond", "A-1005"),
        ("t-inbox-ignore", "A-1001"),
        ("t-inbox-resolve", "A-1005"),
    ]:
        waiting(runner, thread_id, order)
    ledger = Ledger(runner.store.db)

    accepted = inbox(app, "t-inbox-accept", "accept")
    assert accepted["listed"] and "error" not in accepted, accepted
    assert accepted["config"] == {"allow_accept": True, "allow_edit": True, "allow_respond": True}
    assert accepted["answer"][0] == "metadata" and accepted["after"] == "idle"
    [refund] = ledger.refunds("t-inbox-accept")
    assert refund["amount_cents"] == 19999

    edited = inbox(app, "t-inbox-edit", "edit", EDIT_ARGS='{"amount": "10.00"}')
    assert "error" not in edited and edited["after"] == "idle", edited
    [refund] = ledger.refunds("t-inbox-edit")
    assert refund["amount_cents"] == 1000

    responded = inbox(app, "t-inbox-respond", "respond", RESPONSE="photos first, please")
    assert "error" not in responded and responded["after"] == "idle", responded
    assert ledger.refunds("t-inbox-respond") == []
    decided = runner.runs.last_claim("t-inbox-respond").detail["decision"]
    assert decided == {"decisions": [{"type": "reject", "message": "photos first, please"}]}

    for act in ("ignore", "resolve"):
        out = inbox(app, f"t-inbox-{act}", act)
        # runs.create and updateState answer at once; the run finishes after the answer
        assert "error" not in out and out["after"] in ("busy", "idle"), out
        thread_id = f"t-inbox-{act}"
        until(lambda t=thread_id: runner.runs.get(t).status == "done", f"the {act} to finish")
        assert ledger.refunds(f"t-inbox-{act}") == []
        claim = runner.runs.last_claim(f"t-inbox-{act}").detail
        assert claim["decision"] == {"decisions": [{"type": "reject"}]}
        assert claim["approvers"] == ["bob"] and claim["source"] == "langgraph"

    # a second press on a decided request is refused, and nothing runs twice
    again = inbox(app, "t-inbox-accept", "ignore", SEEN=json.dumps(accepted["seen"]))
    assert again["error"]["status"] == 409, again
    assert len(ledger.refunds("t-inbox-accept")) == 1


@pytest.fixture
def alone(tmp_path, postgres_url, monkeypatch) -> Iterator[tuple[dict, dict, Path, Runner]]:
    """A database of its own, with no server yet: any resumer on a database takes its queued
    claims, so the module's server would otherwise finish what the dying one must hold."""
    with fresh_database("postgres", tmp_path, postgres_url) as db_env:
        keys = {
            name: api_key(db_env, name, role)["authorization"].split()[1]
            for name, role in {"bob": "reviewer", "rita": "requester"}.items()
        }
        for name in settings_to_clear():
            monkeypatch.delenv(name, raising=False)
        monkeypatch.chdir(tmp_path)
        for name, value in {**db_env, **POLICY}.items():
            monkeypatch.setenv(name, value)
        with open_store() as store:
            yield db_env, keys, tmp_path, Runner(store)


def test_a_stream_that_outlives_its_server_is_joined_again_from_the_database(alone):
    """The server dies (SIGKILL) while the resumed run carries out the refund; a new server on
    the same port answers ``join_stream`` with every event after the last one the client
    read, once recovery has finished the run: nothing lost, nothing twice."""
    db_env, keys, tmp, runner = alone
    env = worker_env(db_env, **POLICY, LEASE_SECONDS="2")
    log = tmp / "dying.log"
    dying = start_server({**env, "FAULTS": "tool.after-write=sleep:300"}, log)
    rita = get_sync_client(url=f"{dying.url}/lg", api_key=keys["rita"], timeout=60)
    [assistant] = rita.assistants.search(graph_id="refund")
    thread_id = rita.threads.create()["thread_id"]
    given = {"messages": [{"role": "user", "content": ASK}]}
    paused = rita.runs.wait(thread_id, assistant["assistant_id"], input=given)
    assert "__interrupt__" in paused, paused
    bob = get_sync_client(url=f"{dying.url}/lg", api_key=keys["bob"], timeout=60)
    [pending] = bob.threads.get_state(thread_id)["interrupts"]
    command = {"resume": {pending["id"]: {"decisions": [{"type": "approve"}]}}}
    modes = ["values", "updates"]
    read: list = []
    dropped: list[BaseException] = []

    def follow() -> None:
        try:
            for part in bob.runs.stream(thread_id, "refund", command=command, stream_mode=modes):
                read.append(part)
        except Exception as exc:  # noqa: BLE001 - the connection dies with the server
            dropped.append(exc)

    reader = threading.Thread(target=follow)
    reader.start()
    until(lambda: "tool.after-write: pausing" in Path(log).read_text(), "the refund's write")
    until(lambda: any(p.id for p in read), "the client read events before the crash")
    kill_tree(dying)  # SIGKILL, with any resumer processes: nothing is handed back
    reader.join(timeout=60)
    assert dropped and not reader.is_alive(), read
    run_id = read[0].data["run_id"]
    last = max(int(p.id) for p in read if p.id)

    restarted = start_server(env, tmp / "restarted.log", port=dying.port)
    try:
        run = runner.runs.get(thread_id)
        assert run.status == "resuming"
        past((run.lease_until or 0) + 0.05, "the killed server's lease on the run")
        [outcome] = [o for o in runner.recovery_pass() if o.thread_id == thread_id]
        assert outcome.status == "done", outcome
        bob = get_sync_client(url=f"{restarted.url}/lg", api_key=keys["bob"], timeout=60)
        rest = list(bob.runs.join_stream(thread_id, run_id, last_event_id=str(last)))
        ids = [int(p.id) for p in rest]
        assert ids == list(range(last + 1, last + 1 + len(ids))) and ids, rest
        assert rest[-1].event == "values"
        assert rest[-1].data["messages"][-1]["content"].startswith("Refunded 199.99")
        everything = list(bob.runs.join_stream(thread_id, run_id))
        assert [p.id for p in everything[1:]] == [str(i) for i in range(1, ids[-1] + 1)]
        assert bob.runs.get(thread_id, run_id)["status"] == "success"
        assert len(Ledger(runner.store.db).refunds(thread_id)) == 1  # the receipt held
    finally:
        restarted.stop()
