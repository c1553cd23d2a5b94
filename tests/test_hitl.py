"""The typed HITL contract: the JSON it reads is the JSON it writes (it is stored on runs and sent
to LangGraph and the inboxes), digests stored on waiting runs stay valid, and a reviewer's bad
decision is refused with the same words as before."""

from __future__ import annotations

import copy

import pytest
from langgraph.types import Interrupt

from core.errors import UserError
from core.hitl import HitlRequest
from core.hitl_decisions import Approve, Decisions, Edit, validate_decisions
from worker.requests import combined, resume_command

BATCHED = {
    "action_requests": [
        {
            "name": "issue_refund",
            "args": {"order_id": "A-1001", "amount": 49.9, "reason": "Ünïcode €"},
            "description": "Refund",
        },
        {"name": "lookup_order", "args": {"order_id": "A-1001"}},  # description is optional
    ],
    "review_configs": [
        {
            "action_name": "issue_refund",
            "allowed_decisions": ["approve", "edit", "reject"],
            "args_schema": {"type": "object"},  # a key we do not use is kept
            "locked_arguments": ["order_id"],
        },
        {"action_name": "lookup_order", "allowed_decisions": ["approve", "reject"]},
    ],
}
PER_CALL = {
    "type": "tool_approval",
    "tool_call_id": "call_1",
    "name": "send_email",
    "args": {"to": "a@example.com"},
    "description": "Send it?",
}


def test_round_trips_and_digest_are_unchanged():
    for raw in (BATCHED, {"action_requests": [], "review_configs": []}):
        assert HitlRequest.parse(raw).to_json() == raw
    # pinned: digests computed before the typed models are stored on waiting runs
    assert HitlRequest.parse(BATCHED).digest() == "da0b9387c8d5d3083ffbf82f9628cf02"
    request = HitlRequest.parse(BATCHED)
    assert request.allowed(1) == ["approve", "reject"]
    assert request.locked(0) == ["order_id"] and request.locked(1) == []
    assert request.summary().startswith('issue_refund(order_id="A-1001", amount=49.9')


def test_both_middleware_modes_combine_into_one_request():
    per_call = Interrupt(PER_CALL, "b" * 32)
    request = combined((Interrupt(BATCHED, "a" * 32), per_call))
    json = request.to_json()
    assert json["action_requests"][:2] == BATCHED["action_requests"]
    assert json["action_requests"][2] == {k: v for k, v in PER_CALL.items() if k != "type"}
    assert json["review_configs"][2] == {
        "action_name": "send_email",
        "allowed_decisions": ["approve", "edit", "reject", "respond"],
    }
    assert HitlRequest.parse(json) == request and combined((per_call,)).to_json() == {
        "action_requests": [json["action_requests"][2]],
        "review_configs": [json["review_configs"][2]],
    }
    decisions = Decisions.parse(
        {
            "decisions": [
                {"type": "approve"},
                {"type": "reject"},
                {"type": "respond", "message": "sent by hand"},
            ]
        }
    )
    command = resume_command(
        (Interrupt(BATCHED, "a" * 32), per_call), decisions, HitlRequest.parse(json)
    )
    assert command.resume == {
        "a" * 32: {"decisions": [{"type": "approve"}, {"type": "reject"}]},
        "b" * 32: {"type": "respond", "message": "sent by hand"},
    }


def test_decisions_round_trip_and_edits_apply():
    raw = [
        {"type": "approve"},
        {"type": "edit", "edited_action": {"name": "issue_refund", "args": {"amount": 5}}},
        {"type": "reject"},
        {"type": "reject", "message": "duplicate"},
        {"type": "respond", "message": "done"},
    ]
    decisions = Decisions.parse({"decisions": raw})
    assert decisions.to_json() == raw and decisions.resume_value() == {"decisions": raw}
    assert decisions.approving and not Decisions.parse([raw[2]]).approving
    assert decisions[1] == Edit({"amount": 5}, "issue_refund")
    edit = [Approve(), Edit({"order_id": "X"}, "lookup_order")]
    edited = HitlRequest.parse(BATCHED).edited(edit)
    assert edited.actions[1].args == {"order_id": "X"}
    locked = HitlRequest.parse(BATCHED).locking({"lookup_order": ["order_id"]}).to_json()
    assert locked["review_configs"][1]["locked_arguments"] == ["order_id"]
    assert BATCHED["review_configs"][1].get("locked_arguments") is None  # not changed in place


def _edit(args: dict, name: str = "issue_refund") -> dict:
    return {"type": "edit", "edited_action": {"name": name, "args": args}}


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        (None, r'^a decision must be \{"decisions": \[\.\.\.\]\}$'),
        ([{"type": "approve"}], r"^expected 2 decision\(s\), one per proposed action, got 1$"),
        ([{"type": "yes"}, {}], "^decision 1: type must be one of approve, edit, reject, respond$"),
        ([{"type": "approve"}, {"type": "respond"}], "^decision 2: respond is not allowed for "),
        ([_edit({}, "lookup_order"), {"type": "approve"}], "^decision 1: an edit must keep the "),
        ([_edit([]), {"type": "approve"}], "^edited arguments for issue_refund must be a JSON"),
        ([_edit({"amount": "x"}), {"type": "approve"}], "^invalid arguments for issue_refund: "),
        ([_edit({"order_id": "B"}), {"type": "approve"}], "^decision 1: order_id of issue_ref"),
        ([{"type": "approve"}, {"type": "reject", "message": 3}], "^decision 2: message must be"),
    ],
)
def test_bad_decisions_are_refused_with_todays_messages(decisions, message):
    schemas = {"issue_refund": {"properties": {"amount": {"type": "number"}}}}
    resume = None if decisions is None else {"decisions": decisions}
    before = copy.deepcopy(resume)
    with pytest.raises(UserError, match=message):
        validate_decisions(HitlRequest.parse(BATCHED), resume, schemas)
    assert resume == before


def test_valid_decisions_come_back_typed_from_json_or_typed_input():
    raw = {"decisions": [_edit({"order_id": "A-1001", "amount": 5}), {"type": "approve"}]}
    typed = validate_decisions(HitlRequest.parse(BATCHED), raw)
    assert typed.to_json() == raw["decisions"]
    assert validate_decisions(HitlRequest.parse(BATCHED), typed) == typed


def test_the_wire_is_read_once_into_typed_decisions_and_written_back_unchanged():
    from core.hitl_decisions import Answer, Approve, Edit, Reject, Respond, read_answers

    raw = [
        {"type": "approve"},
        _edit({"amount": 5}),
        {"type": "reject"},
        {"type": "reject", "message": "duplicate"},
        {"type": "respond", "message": "done"},
        {"type": "answer", "value": {"ok": True}},
        None,
    ]
    typed = read_answers({"decisions": raw})
    assert typed == [
        Approve(),
        Edit({"amount": 5}, "issue_refund"),
        Reject(),
        Reject("duplicate"),
        Respond("done"),
        Answer({"ok": True}),
        None,
    ]
    assert [None if t is None else t.to_json() for t in typed] == raw
    with pytest.raises(UserError, match="^decision 2: type must be one of"):
        read_answers([{"type": "approve"}, {"type": "yes"}])
    with pytest.raises(UserError, match=r"^decision 1 \(approve\) has fields it may not carry: x"):
        read_answers([{"type": "approve", "x": 1}])
