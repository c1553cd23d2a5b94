"""Any ``interrupt()``: graphs written as LangGraph's documentation writes them
(``examples/plain_interrupts.py``) pause, are answered through the one decision path by any
source, and resume with each answer exactly where it was asked."""

from __future__ import annotations

import pytest
from conftest import run_cli

from api.runs import run_view
from ops.notify import event_body, slack_body
from store.states import Status
from testkit import loopback
from testkit.decide import answer, claim
from worker.decisions import Applied, Decision, Pending, Source
from worker.refusals import Refusal, Refused
from worker.runner import Runner

EX = "examples.plain_interrupts:"


def start(runner: Runner, factory: str, thread_id: str, text: str = "Order 1042, 3 chairs"):
    outcome = runner.start(text, thread_id=thread_id, workflow=EX + factory)
    assert outcome.status == "waiting", outcome
    return runner.runs.get(thread_id)


def values(runner: Runner, factory: str, thread_id: str) -> dict:
    graph = runner.graph(EX + factory)
    return graph.get_state({"configurable": {"thread_id": thread_id}}).values


def said(text: str) -> dict:
    return {"type": "answer", "value": text}


def tables(runner: Runner, thread_id: str) -> tuple:
    db = runner.store.db
    return (
        db.all("SELECT * FROM runs WHERE thread_id = :t", {"t": thread_id}),
        db.all("SELECT * FROM run_answers WHERE thread_id = :t", {"t": thread_id}),
        db.all("SELECT * FROM run_events WHERE thread_id = :t", {"t": thread_id}),
        db.all("SELECT * FROM inbox_requests"),
    )


def finish(runner: Runner, result: Applied | Pending | Refused) -> str:
    assert isinstance(result, Applied), result
    outcome = runner.resume_claimed(result.run)
    assert outcome.status == "done", outcome
    return outcome.result or ""


def test_a_dict_interrupt_is_shown_as_fields_and_answered_with_text_from_the_cli(runner):
    run = start(runner, "ship_order", "t-dict")
    [action] = run.request.to_json()["action_requests"]
    assert action["interrupt"]["value"] == {
        "question": "Ship the order?",
        "order": "Order 1042, 3 chairs",
    }
    assert action["interrupt"]["node"] == "confirm" and len(action["interrupt"]["id"]) == 32
    shown = run_cli("inbox", "show", run.interrupt_id).stdout
    assert "question 1 (from confirm): Ship the order?" in shown, shown
    assert "order: Order 1042, 3 chairs" in shown and "expects: text (or JSON)" in shown
    out = run_cli("inbox", "answer", run.interrupt_id, "--value", "yes, Friday", "--by", "ann")
    assert out.stdout.startswith(f"answer recorded for {run.interrupt_id} by ann"), out.stdout
    [done] = runner.sweep()
    assert done.result == "Answers: ship: yes, Friday", done
    # what the API and the notifications said while it waited
    view = run_view(run)
    assert view["approval"]["action_requests"][0]["interrupt"]["node"] == "confirm"
    body = event_body("approval.requested", run, 0.0, None)
    assert body["data"]["questions"] == [
        {"node": "confirm", "text": "Ship the order?", "value": action["interrupt"]["value"],
         "expects": "text"}
    ]  # fmt: skip
    assert "confirm: Ship the order?" in slack_body("approval.requested", run)["text"]


def test_a_string_interrupt_is_answered_with_json_through_the_api(runner):
    run = start(runner, "string_question", "t-string")
    assert run.request.to_json()["action_requests"][0]["interrupt"]["value"].startswith(
        "Which discount"
    )
    result = claim(runner, "t-string", run.interrupt_id, {"decisions": [said({"percent": 10})]})  # type: ignore[arg-type]
    assert finish(runner, result) == "Answers: discount: {'percent': 10}"


def test_an_answer_is_checked_against_the_declared_schema(runner):
    run = start(runner, "schema_question", "t-schema")
    before = tables(runner, "t-schema")
    for bad in ("lots", 0, {"n": 3}):
        refused = claim(runner, "t-schema", run.interrupt_id, {"decisions": [said(bad)]})  # type: ignore[arg-type]
        assert isinstance(refused, Refused) and refused.reason == Refusal.INVALID, refused
    assert "answer 1: answer: 'lots' is not of type 'integer'" in str(refused_for(runner, run))
    assert tables(runner, "t-schema") == before  # nothing changed
    ok = claim(runner, "t-schema", run.interrupt_id, {"decisions": [said(12)]})  # type: ignore[arg-type]
    assert isinstance(ok, Applied)
    again = runner.resume_claimed(ok.run)
    assert again.status == "waiting"  # the yes/no question is the next pause
    run = runner.runs.get("t-schema")
    assert "expects: yes or no" in run_cli("inbox", "show", run.interrupt_id).stdout
    with pytest.raises(Refused, match="answer yes or no"):
        answer(runner, run.interrupt_id, [{"type": "respond", "message": "perhaps"}], "ann")
    run_cli("inbox", "answer", run.interrupt_id, "--no")
    [done] = runner.sweep()
    assert done.result == "Answers: units: 12; now: False", done


def refused_for(runner: Runner, run) -> Refused:
    result = claim(runner, run.thread_id, run.interrupt_id, {"decisions": [said("lots")]})  # type: ignore[arg-type]
    assert isinstance(result, Refused)
    return result


def test_two_parallel_branches_are_answered_by_two_reviewers_minutes_apart(store):
    now = [1_000_000.0]
    runner = Runner(store, clock=lambda: now[0])
    run = start(runner, "parallel_review", "t-par")
    legal, finance = run.request.to_json()["action_requests"]
    assert (legal["name"], finance["name"]) == ("legal", "finance")
    assert sorted(run.graph_interrupt_ids) == sorted(
        [legal["interrupt"]["id"], finance["interrupt"]["id"]]
    )
    pending = answer(runner, run.interrupt_id, [said("no logos"), None], "alice")  # the CLI
    assert isinstance(pending, Pending) and (pending.answered, pending.questions) == (1, 2)
    assert "answered by alice" in run_cli("inbox", "show", run.interrupt_id).stdout
    before = tables(runner, "t-par")
    with pytest.raises(Refused, match="already answered .*by alice"):  # never asked again
        answer(runner, run.interrupt_id, [said("logos ok"), None], "bob")
    assert tables(runner, "t-par") == before
    now[0] += 300  # five minutes later, another reviewer, another source
    decision = Decision.read(
        [None, said("yes")],
        thread_id="t-par",
        interrupt_id=run.interrupt_id,
        approvers=["bob"],
        source=Source.API,
    )
    result = runner.decide(decision)
    assert isinstance(result, Applied) and result.approvers == ["alice", "bob"]
    assert finish(runner, result) in (
        "Answers: legal: no logos; finance: yes",
        "Answers: finance: yes; legal: no logos",
    )
    answers = values(runner, "parallel_review", "t-par")["answers"]
    assert sorted(answers) == ["finance: yes", "legal: no logos"]  # each node once, its own
    rows = store.db.all("SELECT reviewer, at FROM run_answers WHERE thread_id = 't-par'")
    assert [(r["reviewer"], r["at"]) for r in rows] == [("alice", 1_000_000.0)]


def test_a_workflow_may_resume_as_each_answer_arrives(runner):
    run = start(runner, "parallel_each", "t-each")
    first = answer(runner, run.interrupt_id, [None, said("approved")], "bob")
    assert isinstance(first, Applied)
    [paused] = runner.sweep()
    assert paused.status == "waiting"  # finance ran; legal asks again, in a request of its own
    again = runner.runs.get("t-each")
    assert again.interrupt_id != run.interrupt_id
    assert [a["name"] for a in again.request.to_json()["action_requests"]] == ["legal"]
    answer(runner, again.interrupt_id, [said("fine")], "alice")
    [done] = runner.sweep()
    assert sorted(values(runner, "parallel_each", "t-each")["answers"]) == [
        "finance: approved",
        "legal: fine",
    ]
    assert done.status == "done"


def test_send_fan_out_questions_are_answered_one_by_one(runner):
    run = start(runner, "fan_out", "t-fan", "a, b")
    assert [a["description"] for a in run.request.to_json()["action_requests"]] == [
        "Is a in stock?",
        "Is b in stock?",
    ]
    answer(runner, run.interrupt_id, [None, said("no")], "bob")
    answer(runner, run.interrupt_id, [said("yes"), None], "ann")
    [done] = runner.sweep()
    assert sorted(values(runner, "fan_out", "t-fan")["answers"]) == ["a: yes", "b: no"], done


def test_an_interrupt_inside_a_subgraph(runner):
    run = start(runner, "subgraph_review", "t-sub")
    question = run.request.to_json()["action_requests"][0]["interrupt"]
    assert (question["node"], question["ns"]) == ("sign_off", ["review", "sign_off"])
    answer(runner, run.interrupt_id, [said("granted")], "ann")
    [done] = runner.sweep()
    assert done.result == "Answers: legal: granted"


def test_an_interrupt_inside_a_tool_of_a_create_agent_agent(runner):
    run = start(runner, "tool_agent", "t-tool", "Book a meeting")
    assert (
        run.request.to_json()["action_requests"][0]["description"]
        == "Which room for the meeting on Monday?"
    )
    # Vigilator's free answer (respond) is the answer's text
    answer(runner, run.interrupt_id, [{"type": "respond", "message": "Room 4"}], "ann")
    [done] = runner.sweep()
    assert done.result == "Booked Room 4 on Monday"


def test_three_sequential_interrupts_each_open_their_own_request(runner):
    run = start(runner, "three_questions", "t-seq")
    seen = []
    for word in ("first", "second", "third"):
        seen.append(run.interrupt_id)
        answer(runner, run.interrupt_id, [said(word)], "ann")
        [outcome] = runner.sweep()
        run = runner.runs.get("t-seq")
    assert outcome.status == "done" and len(set(seen)) == 3
    assert outcome.result == "Answers: 1: first; 2: second; 3: third"


def test_a_kill_between_two_answers_of_a_parallel_pause_loses_and_repeats_nothing(
    runner, monkeypatch
):
    run = start(runner, "parallel_review", "t-kill9")
    monkeypatch.setenv("FAULTS", "answer.recorded=kill")
    run_cli("inbox", "answer", run.interrupt_id, "--action", "1", "--value", "no", check_rc=-9)
    monkeypatch.delenv("FAULTS")
    assert runner.runs.get("t-kill9").status == Status.WAITING
    [kept] = runner.decisions.answers.list("t-kill9", run.interrupt_id).values()
    assert kept.decision == said("no")  # the killed process's answer is kept
    result = claim(runner, "t-kill9", run.interrupt_id, {"decisions": [None, said("yes")]})  # type: ignore[arg-type]
    finish(runner, result)
    assert sorted(values(runner, "parallel_review", "t-kill9")["answers"]) == [
        "finance: yes",
        "legal: no",
    ]
    reasons = [e.reason for e in runner.runs.events("t-kill9")]
    assert reasons.count("answer recorded") == 1 and reasons.count("decision claimed") == 1


def test_a_side_effect_before_interrupt_happens_once_with_the_receipts_helper(runner):
    from examples.plain_interrupts import SENT

    SENT.clear()
    run = start(runner, "side_effect", "t-effect")
    assert SENT == ["Order 1042, 3 chairs"]
    answer(runner, run.interrupt_id, [said("yes")], "ann")
    [done] = runner.sweep()  # LangGraph re-ran the node from its first line
    assert done.result == "Answers: close: yes"
    assert SENT == ["Order 1042, 3 chairs"]  # the e-mail went once
    assert len(runner.segments.receipts.for_thread("t-effect")) == 1


def test_a_value_that_is_not_json_fails_the_run_naming_the_node(runner):
    outcome = runner.start("x", thread_id="t-bad", workflow=EX + "bad_value")
    assert outcome.status == "failed"
    assert "node pick_date called interrupt() with a value that is not JSON" in outcome.error
    assert "pass plain JSON" in outcome.error and "\n" not in outcome.error


# -- over real HTTP: the API and the page, two reviewers, two sources ----------------------


def test_questions_over_http_the_page_answers_one_and_the_api_the_other(tmp_path, postgres_url):
    import re
    import time

    import httpx

    from testkit.databases import fresh_database
    from testkit.webapp import api_key, start_server, worker_env

    flow = EX + "parallel_review"
    with fresh_database("postgres", tmp_path, postgres_url) as db_env:
        server = start_server(worker_env(db_env, API_WORKFLOWS=flow), tmp_path / "uvicorn.log")
        try:
            rita = api_key(db_env, "rita", "requester")
            bob, carol = api_key(db_env, "bob", "reviewer"), api_key(db_env, "carol", "reviewer")
            body = {"input": "Launch", "workflow": flow, "thread_id": "t-http"}
            started = loopback.post(f"{server.url}/runs", json=body, headers=rita, timeout=60)
            assert started.status_code == 201, started.text
            approval, tid = started.json()["approval"], started.json()["thread_id"]
            assert [a["interrupt"]["node"] for a in approval["action_requests"]] == [
                "legal",
                "finance",
            ]
            page = httpx.Client(base_url=server.url, timeout=30)
            login = page.get("/inbox/login")
            token = re.search(r'name="csrf" value="([^"]+)"', login.text)[1]  # type: ignore[index]
            credential = bob["authorization"].removeprefix("Bearer ")
            page.post(
                "/inbox/login", data={"csrf": token, "next": "/inbox", "credential": credential}
            )
            shown = page.get(f"/inbox/requests/{tid}")
            assert "Legal: may we use the customer" in shown.text and 'id="answer-0"' in shown.text
            assert "amount" in shown.text and "1200" in shown.text  # an object, as fields
            csrf = re.search(r'name="csrf" value="([^"]+)"', shown.text)[1]  # type: ignore[index]
            fields = {
                "csrf": csrf,
                "interrupt_id": approval["interrupt_id"],
                "digest": approval["digest"],
                "position": "0",
                "answer": "no logos",
            }
            answered = page.post(f"/inbox/requests/{tid}/answer", data=fields)
            assert answered.status_code == 202, answered.text
            assert "1 of 2 answered" in answered.text
            view = loopback.get(f"{server.url}/runs/{tid}", headers=carol, timeout=60).json()
            assert [(a["position"], a["reviewer"]) for a in view["approval"]["answers"]] == [
                (0, "bob")
            ]
            decision = {
                "interrupt_id": approval["interrupt_id"],
                "digest": approval["digest"],
                "decisions": [None, {"type": "answer", "value": "yes"}],
            }
            reply = loopback.post(f"{server.url}/runs/{tid}/decision", json=decision, headers=carol)
            assert reply.status_code == 202 and reply.json()["status"] == "accepted", reply.text
            for _ in range(300):
                view = loopback.get(f"{server.url}/runs/{tid}", headers=carol, timeout=60).json()
                if view["status"] == "done":
                    break
                time.sleep(0.1)  # polls until the run is done (300 looks at most)
            assert view["result"] in (
                "Answers: finance: yes; legal: no logos",
                "Answers: legal: no logos; finance: yes",
            ), view
        finally:
            server.stop()
