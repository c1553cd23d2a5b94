"""One rule table: every source of decisions (the API, the web inbox, the inbox CLI, a signed
webhook, Slack, an e-mail link, a LangGraph client on ``/lg``, the sweep polling an inbox) x
every attempt to get past a rule gets the same refusal, and every table is left as it was.

The rows are attempts: a function that sets a run up as the rule's situation needs (through the
one decision path, in process) and returns the decisive step, made through the source under test;
the expected refusal is the row's. A rule added later (identity, revocation) adds a row here and
every source is held to it. The app runs in this process under uvicorn on 127.0.0.1 (real HTTP,
real Svix and Slack signatures, real SMTP); the CLI and the sweep are driven in process.

The authority matrix: support leads approve up to 100.00, finance above. sam is a support lead,
fay is in finance; rita requests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from api.app import create_app
from inbox.base import Approval
from store.keys import KeyStore, parse_groups, parse_roles
from store.states import Status
from testkit.databases import TEST_RATE_LIMITS, environment, fresh_database
from testkit.servers import LOCAL_SECRET, serve_app
from testkit.tables import reset_books, tables
from testkit.wait import until
from worker.cli import answer_request
from worker.decisions import Applied, Decision, Pending, Source
from worker.refusals import Refusal, Refused
from worker.runner import Runner

MATRIX = """
[refund]
bands = [
  { up_to = "100.00", groups = ["support-leads"] },
  { groups = ["finance"] },
]
"""
APPROVE = {"type": "approve"}
PEOPLE = {"sam": ("support-leads",), "fay": ("finance",), "rita": ()}


@dataclass
class Site:
    url: str
    runner: Runner
    db_env: dict[str, str]
    keys: dict[str, dict[str, str]]
    counter: int = 0
    shown: dict[str, str] = field(default_factory=dict)  # thread id -> the digest first shown

    def settle(self) -> None:
        """No resume in flight in the app (a refusal's snapshot must not race one)."""
        busy = {Status.RUNNING, Status.RESUMING}
        until(
            lambda: (
                not any(
                    r.status in busy and not (r.owner or "").startswith("handoff:")
                    for r in map(self.runner.runs.get, list(self.shown))
                    if r is not None
                )
            ),
            "no resume in flight",
        )

    def start(self, text: str, fresh: bool = True) -> Any:
        """A refund run, requested by rita, waiting on its approval; ``fresh``: the books (and
        what each person approved) start over first."""
        self.settle()
        if fresh:
            reset_books(self.runner.store.db)
        self.counter += 1
        thread_id = f"t-table-{self.counter}"
        outcome = self.runner.start(text, thread_id=thread_id, requested_by="rita")
        assert outcome.status == "waiting", outcome
        run = self.runner.runs.get(thread_id)
        self.shown[thread_id] = run.request_digest
        return run

    def decide(self, run: Any, decisions: list[dict | None], who: str, **kw: Any) -> Any:
        """A decision through the path in process (a set-up step, not the one under test);
        an applied one is resumed to its end, as the sweep would."""
        d = Decision(run.thread_id, run.interrupt_id, decisions, [who], Source.SWEEP, **kw)
        result = self.runner.decide(d)
        assert not isinstance(result, Refused), result
        if isinstance(result, Applied):
            assert self.runner.resume_claimed(result.run).status in ("done", "waiting")
        return result


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp(f"rules-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    matrix = tmp / "authority.toml"
    matrix.write_text(MATRIX)
    with fresh_database(request.param, tmp, pg) as db_env:
        env = {**db_env, **TEST_RATE_LIMITS, "AUTHORITY_FILE": str(matrix)}
        env["WEBHOOK_SECRET"] = LOCAL_SECRET
        with environment(env):
            app = create_app()
            with serve_app(app) as url:
                runner: Runner = app.state.runner
                store = KeyStore(runner.store.db)
                keys = {}
                for name, groups in PEOPLE.items():
                    role = "requester" if name == "rita" else "reviewer"
                    _, token = store.create(name, parse_roles([role]), parse_groups(groups), None)
                    keys[name] = {"authorization": f"Bearer {token}"}
                yield Site(url, runner, db_env, keys)


# -- each source: (site, run, decisions, who, digest) -> ("refused", reason) or what happened --

Verdict = tuple[str, Any]


def _result(result: Applied | Pending | Refused) -> Verdict:
    if isinstance(result, Refused):
        return ("refused", result.reason)
    return ("pending", result.approvers) if isinstance(result, Pending) else ("applied", None)


def via_api(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    body = {"interrupt_id": run.interrupt_id, "digest": digest, "decisions": decisions}
    url = f"{site.url}/runs/{run.thread_id}/decision"
    reply = httpx.post(url, json=body, headers=site.keys[who], timeout=30)
    if reply.status_code >= 400:
        return ("refused", Refusal[reply.json()["error"]["code"].upper()])
    return ("pending" if reply.json()["status"] == "approval recorded" else "applied", None)


def via_cli(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """``python -m inbox decide``, in process: it decides on the local inbox's copy."""
    return _result(answer_request(site.runner, run.interrupt_id, lambda _: decisions, who))


def via_sweep(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """The sweep's source, given an inbox's answer (an inbox polled)."""
    answered = Approval(
        id=run.interrupt_id,
        external_id=f"approval-worker:{run.thread_id}",
        title="",
        description="",
        request={},
        args_schemas={},
        status="answered",
        decisions=decisions,
        created_at=time.time(),
        answered_at=time.time(),
        approvers=[who],
    )
    return _result(site.runner.decide(site.runner.sweeper.decision_of(run.thread_id, answered)))


Source_ = Callable[[Site, Any, list, str, str], Verdict]
SOURCES: dict[str, Source_] = {"api": via_api, "cli": via_cli, "sweep": via_sweep}
PARTS = {"api", "cli", "sweep"}  # sources that can answer some actions of a request only


# -- the attempts (rows): set the situation up, then the decisive step through ``via`` ---------

Step = Callable[[], Verdict]


def partial_past_authority(site: Site, name: str, via: Source_) -> Step:
    """sam, refused "approve everything" on A-1002 (329.00) + A-1005 (199.99), answers one
    action at a time (a source that cannot answer in parts approves the whole)."""
    run = site.start("Refund orders A-1002 and A-1005: both broken")
    assert via(site, run, [APPROVE, APPROVE], "sam", run.request_digest)[1] == Refusal.AUTHORITY
    first = [APPROVE, None] if name in PARTS else [APPROVE, APPROVE]
    return lambda: via(site, run, first, "sam", run.request_digest)


def second_part_past_authority(site: Site, name: str, via: Source_) -> Step:
    """The other half alone, A-1005's 199.99, is past sam's band too."""
    run = site.start("Refund orders A-1002 and A-1005: both broken")
    second = [None, APPROVE] if name in PARTS else [APPROVE, APPROVE]
    return lambda: via(site, run, second, "sam", run.request_digest)


def _edit(order: str, amount: str) -> dict:
    args = {"order_id": order, "amount": float(amount), "reason": "split"}
    return {"type": "edit", "edited_action": {"name": "issue_refund", "args": args}}


def split_past_band(site: Site, name: str, via: Source_) -> Step:
    """fay (finance) refunds 200.00 of A-1002; sam refunds 100.00 of the 129.00 left (within
    his band), then approves the remaining 29.00: 129.00 by sam on one order, past his band."""
    run = site.start("Refund order A-1002: it leaks")
    site.decide(run, [_edit("A-1002", "200.00")], "fay")
    again = site.start("Refund order A-1002: it leaks", fresh=False)
    site.decide(again, [_edit("A-1002", "100.00")], "sam")
    last = site.start("Refund order A-1002: it leaks", fresh=False)
    assert last.request["action_requests"][0]["args"]["amount"] == 29.0
    return lambda: via(site, last, [APPROVE], "sam", last.request_digest)


ATTEMPTS: dict[Callable[[Site, str, Source_], Step], Refusal] = {
    partial_past_authority: Refusal.AUTHORITY,
    second_part_past_authority: Refusal.AUTHORITY,
    split_past_band: Refusal.AUTHORITY,
}


@pytest.mark.parametrize("attempt", list(ATTEMPTS), ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", list(SOURCES))
def test_every_source_refuses_every_attempt_alike_and_changes_nothing(site, name, attempt):
    step = attempt(site, name, SOURCES[name])
    site.settle()
    before = tables(site.db_env)
    assert step() == ("refused", ATTEMPTS[attempt])
    site.settle()
    assert tables(site.db_env) == before


def test_what_one_person_approved_for_one_order_adds_up(site):
    """Within the band each time, past it in all: sam edits A-1002 down to 60.00 twice."""
    run = site.start("Refund order A-1002: it leaks")
    site.decide(run, [_edit("A-1002", "60.00")], "sam")
    again = site.start("Refund order A-1002: it leaks", fresh=False)
    refused = via_api(site, again, [_edit("A-1002", "60.00")], "sam", again.request_digest)
    assert refused == ("refused", Refusal.AUTHORITY)
    message = json.dumps(site.runner.needs(again))
    assert message == '"one of finance"'  # the 269.00 left
