"""The business limits in the demo workflows: an order's refunds never pass its total and a cost
center's orders never pass its budget, even with ten runs racing; a refund with history always
waits for a reviewer, who is told why; a proposal beyond what is left never reaches one."""

from __future__ import annotations

import re
import threading
from decimal import Decimal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from agent.graph import build_graph
from agent.ledger import Ledger
from agent.tools import REFUND_TOOLS, Tool
from agent.workflows import REFUND
from store.db import open_store
from store.receipts import Receipts
from testkit.decide import answer, claim
from worker.decisions import Applied
from worker.refusals import Refusal, Refused
from worker.runner import Runner


def test_ten_runs_refunding_one_order_at_once_never_pass_its_total(runner: Runner):
    threads = [f"t-race-{i}" for i in range(10)]
    waiting = {}
    for thread_id in threads:
        outcome = runner.start("Refund order A-1005: no sound", thread_id=thread_id)
        assert outcome.status == "waiting", outcome
        waiting[thread_id] = outcome.interrupt_id
    # every one was proposed in full (nothing refunded yet) and each names the others' requests
    later = runner.inbox.get(waiting["t-race-9"])
    assert "another request to refund A-1005 waits for a reviewer" in later.description

    barrier = threading.Barrier(len(threads))
    outcomes: dict[str, str] = {}

    def approve_and_resume(thread_id: str) -> None:
        with open_store() as store:  # its own connection, as another process would have
            mine = Runner(store)
            barrier.wait()
            applied = claim(
                mine, thread_id, waiting[thread_id], {"decisions": [{"type": "approve"}]}
            )
            if isinstance(applied, Refused):  # another refund was already made: judged now
                assert applied.reason == Refusal.INVALID, applied
                outcomes[thread_id] = f"could not be issued: {applied.message}"
                return
            assert isinstance(applied, Applied), applied
            outcomes[thread_id] = mine.resume_claimed(applied.run).result or ""

    workers = [threading.Thread(target=approve_and_resume, args=(t,)) for t in threads]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert len(outcomes) == 10, outcomes
    ledger = Ledger(runner.store.db)
    assert ledger.refunded_total("A-1005") <= Decimal("199.99")
    assert len(ledger.refunds()) == 1
    refused = [r for r in outcomes.values() if "could not be issued" in r]
    said = re.compile(r"still refundable on (order )?A-1005")
    assert len(refused) == 9 and all(said.search(r) for r in refused), outcomes


def test_a_small_refund_of_an_order_refunded_before_waits_for_a_reviewer(runner: Runner):
    first = runner.start("Refund order A-1001: broken lid", thread_id="t-first")
    edit = {"order_id": "A-1001", "amount": 35.0, "reason": "the lid only"}
    answer(
        runner,
        first.interrupt_id,
        [{"type": "edit", "edited_action": {"name": "issue_refund", "args": edit}}],
        "bob",
    )
    [done] = runner.sweep()
    assert done.result.startswith("Refunded 35.00 EUR"), done

    # 14.90 is left: under the 20.00 threshold, yet a reviewer must see it, and why
    again = runner.start("Refund order A-1001: still broken", thread_id="t-again")
    assert again.status == "waiting", again
    [action] = runner.runs.get("t-again").request.to_json()["action_requests"]
    assert action["args"]["amount"] == "14.90"  # money as exact text, never a float
    assert "A-1001 was refunded 35.00 so far" in action["description"]
    assert "by run t-first" in action["description"]
    answer(runner, again.interrupt_id, [{"type": "approve"}], "bob")
    runner.sweep()
    assert Ledger(runner.store.db).refunded_total("A-1001") == Decimal("49.90")

    # nothing left: no proposal, no reviewer
    full = runner.start("Refund order A-1001: broken again", thread_id="t-full")
    assert full.status == "done" and "refunded in full already" in full.result
    assert runner.runs.get("t-full").request is None


class Blunt:
    """A model that proposes the whole order total, whatever the lookup said."""

    name = "blunt"

    def invoke(self, messages: list[BaseMessage], tools: list[Tool]) -> AIMessage:
        if isinstance(messages[-1], HumanMessage):
            args = {"order_id": "A-1003", "amount": 15.5, "reason": "cracked"}
            return AIMessage(
                content="", tool_calls=[{"id": "c1", "name": "issue_refund", "args": args}]
            )
        return AIMessage(content=str(messages[-1].content))


def test_a_proposal_beyond_what_is_left_never_reaches_a_reviewer(runner: Runner):
    assert runner.start("Refund order A-1003: cracked", thread_id="t-pan").status == "done"
    store = runner.store
    graph = build_graph(
        Blunt(),
        REFUND_TOOLS,
        REFUND.policy,
        Ledger(store.db),
        Receipts(store.db),
        store.checkpointer,
    )
    state = graph.invoke(
        {"messages": [HumanMessage("Refund order A-1003")]},
        {"configurable": {"thread_id": "t-blunt"}},
    )
    assert "__interrupt__" not in state
    assert "exceeds what is still refundable on A-1003: 0.00" in state["messages"][-1].content
    assert Ledger(store.db).refunded_total("A-1003") == Decimal("15.50")


def test_purchase_orders_racing_never_pass_the_budget(runner: Runner):
    text = "Order 3 office chair for CC-300: the old ones broke"  # 567.00 > 300.00: refused
    refused = runner.start(text, thread_id="t-chairs", workflow="purchase-order")
    assert refused.status == "done" and "cannot place that order" in refused.result
    small = "Order 1 office chair for CC-300: one broke"  # 189.00 of 300.00, reviewed (>= 100)
    waiting = [
        runner.start(small, thread_id=f"t-chair-{i}", workflow="purchase-order") for i in range(4)
    ]
    barrier = threading.Barrier(len(waiting))
    outcomes: dict[int, Applied | Refused] = {}

    def approve(i: int) -> None:
        with open_store() as store:
            mine = Runner(store)
            barrier.wait()
            outcomes[i] = claim(
                mine, f"t-chair-{i}", waiting[i].interrupt_id, {"decisions": [{"type": "approve"}]}
            )
            if isinstance(outcomes[i], Applied):
                mine.resume_claimed(outcomes[i].run)

    workers = [threading.Thread(target=approve, args=(i,)) for i in range(len(waiting))]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    # an approval checked after another order was committed is refused at the decision (the
    # budget left is read then); one checked before is applied and refused by the ledger
    assert len(outcomes) == len(waiting), outcomes
    for outcome in outcomes.values():
        if isinstance(outcome, Refused):
            assert outcome.reason == Refusal.INVALID, outcome
            assert "more than the budget left on CC-300" in outcome.message, outcome
        else:
            assert isinstance(outcome, Applied), outcome
    assert any(isinstance(o, Applied) for o in outcomes.values()), outcomes
    assert Ledger(runner.store.db).committed_cents("CC-300") == 18900
