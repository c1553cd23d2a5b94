"""Bring your own graph: a plain ``create_agent`` graph with ``HumanInTheLoopMiddleware`` runs
through the worker unchanged, in the middleware's batched and per-call modes."""

from __future__ import annotations

import pytest
from conftest import run_cli
from langchain_core.messages import ToolMessage

from core.errors import UserError
from testkit.decide import answer
from worker.runner import Runner

BATCHED = "examples.byo_agent:build_graph"
PER_CALL = "examples.byo_agent:build_graph_per_call"


def tool_messages(runner: Runner, workflow: str, thread_id: str) -> list[ToolMessage]:
    state = runner.graph(workflow).get_state({"configurable": {"thread_id": thread_id}})
    return [m for m in state.values["messages"] if isinstance(m, ToolMessage)]


def test_create_agent_graph_pauses_is_approved_and_recover_resumes_it(runner: Runner):
    paused = runner.start(
        "Credit 15.00 to customer C-42: the delivery was late", thread_id="t-byo", workflow=BATCHED
    )
    assert paused.status == "waiting", paused
    run = runner.runs.get("t-byo")
    # The middleware's own request, stored as it raised it.
    assert run.request.to_json()["action_requests"][0]["name"] == "apply_credit"
    assert run.request.to_json()["action_requests"][0]["args"] == {
        "customer_id": "C-42",
        "amount": 15.0,
        "note": "the delivery was late",
    }
    assert run.request.to_json()["review_configs"] == [
        {"action_name": "apply_credit", "allowed_decisions": ["approve", "edit", "reject"]}
    ]
    # Edits are checked against the tool's schema, read from the graph's ToolNode.
    with pytest.raises(UserError, match="amount: 'lots' is not of type 'number'"):
        answer(
            runner,
            paused.interrupt_id,
            [
                {
                    "type": "edit",
                    "edited_action": {
                        "name": "apply_credit",
                        "args": {"customer_id": "C-42", "amount": "lots", "note": "x"},
                    },
                }
            ],
            "alice",
        )
    answer(runner, paused.interrupt_id, [{"type": "approve"}], "alice")

    out = run_cli("recover.py").stdout
    assert out.startswith("t-byo  Credited 15.00 EUR to C-42 (cr_"), out
    assert runner.runs.get("t-byo").status == "done"
    credits = [m for m in tool_messages(runner, BATCHED, "t-byo") if m.name == "apply_credit"]
    assert len(credits) == 1 and credits[0].status == "success"
    assert run_cli("recover.py").stdout == ""


def test_per_call_interrupts_take_mixed_decisions_matched_by_tool_call_id(runner: Runner):
    text = "Credit 15.00 to customer C-42 and 5.00 to customer C-7: outage"
    paused = runner.start(text, thread_id="t-per-call", workflow=PER_CALL)
    run = runner.runs.get("t-per-call")
    assert len(run.graph_interrupt_ids) == 2  # one interrupt per gated call
    actions = run.request.to_json()["action_requests"]
    assert [a["args"]["customer_id"] for a in actions] == ["C-42", "C-7"]  # the model's order
    assert all(a["tool_call_id"].startswith("call_") for a in actions)
    # Allowed decisions come from each interrupt's response_schema.
    assert run.request.to_json()["review_configs"] == [
        {"action_name": "apply_credit", "allowed_decisions": ["approve", "edit", "reject"]}
    ]
    with pytest.raises(UserError, match="respond is not allowed for apply_credit"):
        answer(
            runner,
            paused.interrupt_id,
            [{"type": "respond", "message": "x"}, {"type": "approve"}],
            "a",
        )

    decisions = [
        {"type": "reject", "message": "already refunded"},
        {
            "type": "edit",
            "edited_action": {
                "name": "apply_credit",
                "args": {"customer_id": "C-7", "amount": 2.5, "note": "outage"},
            },
        },
    ]
    answer(runner, paused.interrupt_id, decisions, "alice")
    [done] = runner.sweep()
    assert done.status == "done", done
    assert done.result.startswith(
        "User rejected the tool call for `apply_credit` with reason: already refunded "
        "Credited 2.50 EUR to C-7 (cr_"
    ), done.result
    by_call = {m.tool_call_id: m for m in tool_messages(runner, PER_CALL, "t-per-call")}
    rejected, edited = (by_call[a["tool_call_id"]] for a in actions)
    assert rejected.status == "error" and "Credited" not in rejected.content
    assert "Executed instead: apply_credit" in edited.content


def test_a_factory_that_ignores_the_checkpointer_is_refused(runner: Runner, monkeypatch):
    from langgraph.checkpoint.memory import InMemorySaver

    import examples.byo_agent as example
    from worker import workflows
    from worker.workflows import register_workflow

    monkeypatch.setitem(workflows._REGISTERED, "in-memory", None)  # removed again after
    register_workflow("in-memory", lambda checkpointer: example.build_graph(InMemorySaver()))
    with pytest.raises(UserError, match="must compile the graph with the checkpointer"):
        runner.start("Credit 1 to C-42: x", thread_id="t-mem", workflow="in-memory")
    with pytest.raises(UserError, match="cannot load workflow 'examples.nope:build'"):
        runner.start("Credit 1 to C-42: x", thread_id="t-mem", workflow="examples.nope:build")
    assert runner.runs.get("t-mem") is None


ASYNC = "examples.async_agent:build_graph"


def test_async_graph_pauses_is_approved_in_the_local_inbox_and_resumes_to_done(runner: Runner):
    """Async tools and a chat model that raises on sync ``invoke`` run through the same runner,
    over the same synchronous checkpointer."""
    from examples.async_agent import AsyncOnlyChatModel
    from worker.asyncgraph import needs_async

    with pytest.raises(NotImplementedError, match="async only"):
        AsyncOnlyChatModel().invoke("hi")
    assert needs_async(runner.graph(ASYNC))  # seen from its async tools
    paused = runner.start(
        "Credit 15.00 to customer C-42: late", thread_id="t-async", workflow=ASYNC
    )
    assert paused.status == "waiting", paused
    run = runner.runs.get("t-async")
    assert run.request.to_json()["action_requests"][0]["args"]["customer_id"] == "C-42"
    answer(runner, paused.interrupt_id, [{"type": "approve"}], "alice")

    out = run_cli("recover.py").stdout  # another process resumes it
    assert out.startswith("t-async  Credited 15.00 EUR to C-42 (cr_"), out
    assert runner.runs.get("t-async").status == "done"
    credits = [m for m in tool_messages(runner, ASYNC, "t-async") if m.name == "apply_credit"]
    assert len(credits) == 1 and credits[0].status == "success"


def test_needs_async_sees_async_nodes_and_a_declared_async_model():
    from typing import TypedDict

    from langgraph.graph import START, StateGraph

    from worker.asyncgraph import needs_async

    class State(TypedDict):
        x: int

    async def step(state: State) -> dict:
        return {"x": 1}

    def plain(state: State) -> dict:
        return {"x": 2}

    for node, expected in ((step, True), (plain, False)):
        builder = StateGraph(State)
        builder.add_node("n", node)
        builder.add_edge(START, "n")
        assert needs_async(builder.compile()) is expected
    assert needs_async(object(), declared=True)
