"""Authority is counted on what one person approves for one cost center in all (purchase
orders; refunds count per order, ``test_rule_table``): a team lead whose band ends at 100.00
approves a 79.00 order for CC-100, is refused a second one for CC-100 (158.00 in all), and may
still approve one for CC-200. In process, on both backends, through the one decision path."""

from __future__ import annotations

import pytest

from store.keys import KeyStore, parse_groups, parse_roles
from testkit.decide import claim
from worker.decisions import Applied
from worker.refusals import Refusal, Refused

MATRIX = """
[purchase-order]
bands = [
  { up_to = "100.00", groups = ["team-leads"] },
  { groups = ["finance"] },
]
"""
APPROVE = {"decisions": [{"type": "approve"}]}


@pytest.fixture
def lead(runner, tmp_path, monkeypatch):
    matrix = tmp_path / "authority.toml"
    matrix.write_text(MATRIX)
    monkeypatch.setenv("AUTHORITY_FILE", str(matrix))
    monkeypatch.setenv("PURCHASE_ORDER_APPROVAL_THRESHOLD", "1")
    keys = KeyStore(runner.store.db)
    keys.create("tess", parse_roles(["reviewer"]), parse_groups(("team-leads",)), None)
    return runner


def _order(runner, thread_id: str, center: str):
    text = f"Order 1 toner cartridge for {center}: the printer is empty"
    outcome = runner.start(text, thread_id=thread_id, workflow="purchase-order")
    assert outcome.status == "waiting", outcome
    run = runner.runs.get(thread_id)
    [action] = run.request.to_json()["action_requests"]
    assert action["args"]["cost_center"] == center and action["args"]["unit_price"] == "79.00"
    return run


def test_a_lead_approves_per_cost_center_up_to_the_band_in_all(lead):
    first = _order(lead, "t-po-1", "CC-100")
    done = claim(lead, first.thread_id, first.interrupt_id, APPROVE, by="tess")
    assert isinstance(done, Applied), done
    assert lead.resume_claimed(done.run).status == "done"

    second = _order(lead, "t-po-2", "CC-100")
    events = lead.runs.events(second.thread_id)
    refused = claim(lead, second.thread_id, second.interrupt_id, APPROVE, by="tess")
    assert isinstance(refused, Refused) and refused.reason == Refusal.AUTHORITY, refused
    assert "158.00, with what tess approved before" in refused.message
    assert lead.runs.events(second.thread_id) == events
    assert lead.runs.get(second.thread_id).status == "waiting"

    other = _order(lead, "t-po-3", "CC-200")
    assert isinstance(claim(lead, other.thread_id, other.interrupt_id, APPROVE, by="tess"), Applied)
