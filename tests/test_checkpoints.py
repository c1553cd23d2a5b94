"""A resume reads its checkpoint from Postgres once: the read that chooses what to feed the graph
also starts the stream, and nothing stale is ever served (``store/checkpoints.py``)."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.postgres import PostgresSaver

from store.checkpoints import read_once
from testkit.decide import claim
from worker.decisions import Applied
from worker.runner import Runner

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

APPROVE = {"decisions": [{"type": "approve"}]}


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Each latest-checkpoint read that reached Postgres, by thread."""
    seen: list[str] = []
    real = PostgresSaver.get_tuple

    def counted(self, config):
        seen.append(config["configurable"]["thread_id"])
        return real(self, config)

    monkeypatch.setattr(PostgresSaver, "get_tuple", counted)
    return seen


def _waiting(runner: Runner, thread_id: str) -> str:
    outcome = runner.start("Refund order A-1001: arrived broken", thread_id=thread_id)
    assert outcome.status == "waiting"
    return outcome.interrupt_id


def test_a_claimed_resume_reads_its_checkpoint_once(runner, reads):
    claimed = claim(runner, "t-once", _waiting(runner, "t-once"), APPROVE, "alice")
    assert isinstance(claimed, Applied)
    reads.clear()
    outcome = runner.resume_claimed(claimed.run)
    assert outcome.status == "done"
    assert reads == ["t-once"]
    # a later read is the database's again, not the copy kept for the stream
    state = runner.graph("refund").get_state({"configurable": {"thread_id": "t-once"}})
    assert reads == ["t-once", "t-once"] and not state.next


def test_a_write_to_the_thread_drops_the_kept_read(runner, reads):
    _waiting(runner, "t-drop")
    graph = runner.graph("refund")
    config = {"configurable": {"thread_id": "t-drop"}}
    reads.clear()
    with read_once(graph.checkpointer, "t-drop"):
        first = graph.checkpointer.get_tuple(config)
        graph.update_state(config, {"messages": []})  # a write between the two reads
        second = graph.checkpointer.get_tuple(config)
    assert reads[:2] == ["t-drop", "t-drop"]  # the second read went to the database
    assert second.checkpoint["id"] != first.checkpoint["id"]
    assert (
        second.checkpoint["id"] == graph.get_state(config).config["configurable"]["checkpoint_id"]
    )


def test_the_kept_read_serves_a_fresh_copy_once(runner, reads):
    _waiting(runner, "t-copy")
    saver = runner.graph("refund").checkpointer
    config = {"configurable": {"thread_id": "t-copy"}}
    reads.clear()
    with read_once(saver, "t-copy"):
        first = saver.get_tuple(config)
        first.checkpoint["channel_versions"].clear()  # LangGraph edits what it loaded
        second = saver.get_tuple(config)
        third = saver.get_tuple(config)
    assert reads == ["t-copy", "t-copy"]  # the second came from the first; the third did not
    assert second.checkpoint["channel_versions"] == third.checkpoint["channel_versions"] != {}
