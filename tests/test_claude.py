"""The Claude adapter through the real ``anthropic`` client, against a local Messages API.

What the client sends is asserted on the wire: the tools and their schemas, the tool_use turn,
and the tool_result after each kind of decision. Failures (401, 429, 529, malformed tool input)
end in a failed run with the error recorded, and a failed run can be retried.
"""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from agent.graph import REPEAT_NOTE
from agent.ledger import Ledger
from core.settings import ANTHROPIC_MODEL
from testkit.decide import answer
from testkit.fake_claude import (
    FakeClaude,
    error,
    message,
    refund_agent,
    text,
    tool_results,
    tool_use,
)
from worker.runner import Runner

KEY = "sk-ant-test-0123456789"
REQUEST = "Refund order A-1001: the kettle arrived broken"

DEFAULT_MODEL = ANTHROPIC_MODEL.default


@pytest.fixture
def claude(backend, monkeypatch):
    with FakeClaude() as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_MAX_RETRIES", "2")
        yield fake


def last_result(fake: FakeClaude) -> dict:
    [result] = tool_results(fake.bodies()[-1])
    return result


@pytest.mark.parametrize("kind", ["approve", "edit", "reject"])
def test_refund_flow_and_the_tool_result_after_each_decision(claude, store, kind):
    runner = Runner(store)
    paused = runner.start(REQUEST, thread_id="t-claude")
    assert paused.status == "waiting", paused

    first = claude.bodies()[0]
    assert first["model"] == DEFAULT_MODEL and "refund" in first["system"]
    schemas = {t["name"]: t["input_schema"] for t in first["tools"]}
    assert schemas["issue_refund"]["required"] == ["order_id", "amount", "reason"]
    assert first["messages"] == [{"role": "user", "content": [{"type": "text", "text": REQUEST}]}]
    assert KEY in claude.requests[0]["headers"].get("Authorization", "") + claude.requests[0][
        "headers"
    ].get("x-api-key", "")

    # The second call carried the lookup's tool_result; Claude's answer is the proposal.
    [lookup] = tool_results(claude.bodies()[1])
    assert json.loads(lookup["content"])["total"] == "49.90" and "is_error" not in lookup
    approval = runner.inbox.get(paused.interrupt_id)
    [action] = approval.request.to_json()["action_requests"]
    assert action["args"] == {"order_id": "A-1001", "amount": "49.90", "reason": "broken"}
    roles = [(m["role"], m.get("name")) for m in approval.conversation]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("tool", "lookup_order"),
        ("assistant", None),
    ]
    assert "proposing the refund" in approval.conversation[-1]["text"]

    decision = {
        "approve": {"type": "approve"},
        "edit": {
            "type": "edit",
            "edited_action": {
                "name": "issue_refund",
                "args": {"order_id": "A-1001", "amount": 20, "reason": "partial"},
            },
        },
        "reject": {"type": "reject", "message": "outside the return window"},
    }[kind]
    answer(runner, paused.interrupt_id, [decision], "alice")
    [done] = runner.sweep()
    assert done.status == "done", done

    body = claude.bodies()[-1]
    proposed = next(b for b in body["messages"][-2]["content"] if b["type"] == "tool_use")
    result = last_result(claude)
    assert result["tool_use_id"] == proposed["id"]
    refunds = Ledger(store.db).refunds()
    if kind == "approve":
        assert "is_error" not in result
        assert json.loads(result["content"])["amount"] == "49.90"
        assert [r["amount_cents"] for r in refunds] == [4990]
    elif kind == "edit":
        content = json.loads(result["content"])
        assert "is_error" not in result and content["amount"] == "20.00"
        assert content["reviewer_edit"]["proposed"]["amount"] == "49.90"
        assert content["reviewer_edit"]["executed"]["amount"] == 20
        assert "Do not propose the original call again" in content["reviewer_edit"]["note"]
        assert proposed["input"]["amount"] == 20  # the turn shows the call that ran
        assert [(r["amount_cents"], r["reason"]) for r in refunds] == [(2000, "partial")]
    else:
        assert result["is_error"] is True
        assert result["content"].startswith("Rejected by the reviewer: outside the return window")
        assert "Do not propose it again" in result["content"]
        assert refunds == []
    assert done.result == f"Claude says: {result['content']}"
    assert len(claude.requests) == 3


def test_a_rejected_call_proposed_again_is_not_run_and_not_asked_again(claude, store):
    def stubborn(body: dict):
        results = tool_results(body)
        if results and results[0].get("is_error") and "Rejected" in results[0]["content"]:
            uses = [b for b in body["messages"][-2]["content"] if b["type"] == "tool_use"]
            return tool_use("issue_refund", uses[0]["input"])  # same call, new id
        if results and results[0]["content"] == REPEAT_NOTE:
            return text("Understood, no refund.")
        return refund_agent(body)

    claude.script = stubborn
    runner = Runner(store)
    paused = runner.start(REQUEST, thread_id="t-stubborn")
    answer(runner, paused.interrupt_id, [{"type": "reject", "message": "no"}], "alice")
    [done] = runner.sweep()
    assert (done.status, done.result) == ("done", "Understood, no refund.")
    repeat = tool_results(claude.bodies()[-1])[0]
    assert repeat["is_error"] is True and repeat["content"] == REPEAT_NOTE
    assert len(store.db.all("SELECT id FROM inbox_requests")) == 1
    assert Ledger(store.db).refunds() == []


def test_a_429_is_retried_by_the_sdk_then_the_run_goes_on(claude, store):
    claude.queue = [error(429, "rate_limit_error", "Number of requests has exceeded your limit")]
    outcome = Runner(store).start(REQUEST, thread_id="t-429")
    assert outcome.status == "waiting", outcome
    bodies = claude.bodies()
    assert len(bodies) == 3 and bodies[0] == bodies[1]  # the same request, sent again
    assert claude.requests[1]["headers"]["x-stainless-retry-count"] == "1"


def test_exhausted_retries_fail_the_run_and_retry_continues_it(claude, store, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_MAX_RETRIES", "1")
    claude.fail_with = error(529, "overloaded_error", "Overloaded")
    runner = Runner(store)
    outcome = runner.start(REQUEST, thread_id="t-529")
    assert outcome.status == "failed"
    run = runner.runs.get("t-529")
    assert run.status == "failed" and run.owner is None
    assert run.error == (
        "ModelError: Claude API error 529 overloaded_error: Overloaded "
        "(still failing after 1 retries) [request req_test]"
    )
    assert len(claude.requests) == 2
    assert [e.to_status for e in runner.runs.events("t-529")] == ["running", "failed"]

    claude.fail_with = None  # the API is back
    out = run_cli("recover.py", "--retry", "t-529").stdout
    assert out.startswith("t-529  paused on interrupt "), out
    run = runner.runs.get("t-529")
    assert (run.status, run.error, run.attempts) == ("waiting", None, 2)
    assert [e.reason for e in runner.runs.events("t-529")] == [
        "started",
        "failed",
        "retry",
        "handed-off decision taken up",  # a retry is queued and taken like any claim
        "paused for approval",
    ]
    proc = run_cli("recover.py", "--retry", "t-529", check_rc=2)
    assert proc.stderr.strip() == "error: run t-529 is waiting, not failed; only failed runs retry"


def test_retry_after_a_failed_resume_redelivers_the_stored_decision(claude, store):
    runner = Runner(store)
    paused = runner.start(REQUEST, thread_id="t-resume")
    answer(runner, paused.interrupt_id, [{"type": "approve"}], "alice")
    claude.queue = [error(401, "authentication_error", "invalid x-api-key")]
    [failed] = runner.sweep()  # the refund ran; the model call after it failed
    assert failed.status == "failed" and "401" in failed.error
    assert len(Ledger(store.db).refunds()) == 1
    done = Runner(store).retry("t-resume")
    assert done.status == "done" and done.result.startswith('Claude says: {"status": "refunded"')
    assert len(Ledger(store.db).refunds()) == 1  # continued from the checkpoint, not re-run


@pytest.mark.parametrize(
    ("reply", "needle", "calls"),
    [
        (
            error(401, "authentication_error", "invalid x-api-key"),
            "ModelError: Claude API error 401 authentication_error: invalid x-api-key; "
            "check ANTHROPIC_API_KEY [request req_test]",
            1,  # not retried
        ),
        (
            tool_use("lookup_order", "A-1001"),
            "ModelError: Claude sent malformed input for tool lookup_order: expected a JSON "
            "object, got str",
            1,
        ),
        (
            tool_use("lookup_order", {"order": "A-1001"}),
            "ModelError: the model proposed malformed input for lookup_order: order_id: "
            "Field required",
            1,
        ),
        (
            tool_use("delete_everything", {}),
            "ModelError: the model called an unknown tool 'delete_everything'",
            1,
        ),
        (
            message(
                [{"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {}}],
                stop_reason="max_tokens",
            ),
            "ModelError: Claude ran out of output tokens while writing a tool call",
            1,
        ),
        (  # a gateway that echoes the key it was sent: scrubbed before the error is kept
            error(400, "invalid_request_error", f"bad header x-api-key: {KEY}"),
            "ModelError: Claude API error 400 invalid_request_error: bad header x-api-key: ***",
            1,
        ),
    ],
    ids=["401", "input-not-object", "input-off-schema", "unknown-tool", "max-tokens", "echo-key"],
)
def test_model_failures_fail_the_run_with_the_error(claude, store, reply, needle, calls):
    claude.fail_with = reply
    outcome = Runner(store).start(REQUEST, thread_id="t-bad-model")
    run = Runner(store).runs.get("t-bad-model")
    assert (outcome.status, run.status) == ("failed", "failed")
    assert run.error.startswith(needle), run.error
    assert KEY not in run.error
    assert len(claude.requests) == calls
    assert store.db.all("SELECT id FROM inbox_requests") == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_run_py_prints_one_line_and_names_the_model_on_stderr(claude, store):
    proc = run_cli("run.py", REQUEST, "--thread-id", "t-cli")
    assert proc.stdout.count("\n") == 1 and proc.stdout.startswith("paused on interrupt ")
    assert proc.stderr.splitlines() == [f"thread: t-cli  model: claude ({DEFAULT_MODEL})"]
    assert len(claude.requests) == 2
    # A multi-line answer is still one line on stdout; the run keeps the full text.
    claude.fail_with = text("Done.\n\nAnything else?")
    proc = run_cli("run.py", "Hello", "--thread-id", "t-cli-2")
    assert proc.stdout == "Done. Anything else?\n"
    assert Runner(store).runs.get("t-cli-2").result == "Done.\n\nAnything else?"
