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
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from api.app import create_app
from inbox.hitl import HitlRequest
from ops import mail
from store.keys import KeyStore, parse_groups, parse_roles
from store.states import Status
from testkit.databases import TEST_RATE_LIMITS, environment, fresh_database
from testkit.mail import MailBox, links
from testkit.servers import LOCAL_SECRET, serve_app, svix_headers
from testkit.slack import SlackStandIn, link_slack, signed_interaction
from testkit.sources import answered, result_of
from testkit.tables import reset_books, settled_tables
from testkit.wait import until
from worker.cli import answer_request
from worker.decisions import Applied, Decision, Source
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
SLACK_USERS = {"sam": "USAM", "fay": "UFAY"}
SIGNING = "slack-signing-secret-for-the-rule-table"
LINKS = "link-secret-for-the-rule-table-0123456789"


@dataclass
class Site:
    url: str
    runner: Runner
    db_env: dict[str, str]
    keys: dict[str, dict[str, str]]
    box: MailBox
    pages: dict[str, httpx.Client] = field(default_factory=dict)  # a session per reviewer
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
    slack, box = SlackStandIn("xoxb-rules").start(), MailBox().start()
    channels = {
        "WEBHOOK_SECRET": LOCAL_SECRET,
        "SLACK_BOT_TOKEN": "xoxb-rules",
        "SLACK_SIGNING_SECRET": SIGNING,
        "SLACK_CHANNEL": "C0APPROVALS",
        "SLACK_API_URL": slack.url,
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(box.port),
        "SMTP_TLS": "none",
        "EMAIL_FROM": "Approvals <approvals@example.test>",
        "EMAIL_LINK_SECRET": LINKS,
        "PUBLIC_URL": "http://127.0.0.1:9",  # links are read for their token only
    }
    with fresh_database(request.param, tmp, pg) as db_env:
        env = {**db_env, **TEST_RATE_LIMITS, **channels, "AUTHORITY_FILE": str(matrix)}
        with environment(env):
            app = create_app()
            with serve_app(app) as url:
                runner: Runner = app.state.runner
                store = KeyStore(runner.store.db)
                keys = {}
                for name, groups in PEOPLE.items():
                    role = "requester" if name == "rita" else "reviewer"
                    email = f"{name}@example.test"
                    _, token = store.create(name, parse_roles([role]), parse_groups(groups), email)
                    keys[name] = {"authorization": f"Bearer {token}"}
                for name, user in SLACK_USERS.items():  # each reviewer's Slack user, proven
                    link_slack(url, keys[name], user, SIGNING)  # from both sides
                pages = {n: signed_in(url, keys[n]) for n in SLACK_USERS}
                yield Site(url, runner, db_env, keys, box, pages)
                for client in pages.values():
                    client.close()
    slack.stop()
    box.stop()


# -- each source: (site, run, decisions, who, digest) -> ("refused", reason) or what happened --

Verdict = tuple[str, Any]


def _refused(reply: httpx.Response) -> Verdict:
    if reply.status_code >= 400:
        return ("refused", Refusal[reply.json()["error"]["code"].upper()])
    return ("pending" if reply.json()["status"] == "approval recorded" else "applied", None)


def via_api(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    body = {"interrupt_id": run.interrupt_id, "digest": digest, "decisions": decisions}
    url = f"{site.url}/runs/{run.thread_id}/decision"
    return _refused(httpx.post(url, json=body, headers=site.keys[who], timeout=30))


def via_cli(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """``python -m inbox decide``, in process: it decides on the local inbox's copy."""
    return result_of(answer_request(site.runner, run.interrupt_id, lambda _: decisions, who))


def via_sweep(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """The sweep's source, given an inbox's answer (an inbox polled)."""
    answer = answered(run.thread_id, run.interrupt_id, decisions, who, digest)
    return result_of(site.runner.decide(site.runner.sweeper.decision_of(run.thread_id, answer)))


def signed_in(url: str, headers: dict[str, str]) -> httpx.Client:
    """A browser session on the web inbox, signed in with the reviewer's key."""
    client = httpx.Client(base_url=url, follow_redirects=False, timeout=30)
    login = client.get("/inbox/login").text
    credential = headers["authorization"].removeprefix("Bearer ")
    form = {"csrf": _csrf(login), "next": "/inbox", "credential": credential}
    assert client.post("/inbox/login", data=form).status_code == 303
    return client


def via_page(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """The web inbox's request page: its form decides every action."""
    client = site.pages[who]
    page = client.get(f"/inbox/requests/{run.thread_id}").text
    form = {"csrf": _csrf(page), "interrupt_id": run.interrupt_id, "digest": digest}
    form |= {f"d{i}": "approve" for i in range(len(decisions))}
    reply = client.post(f"/inbox/requests/{run.thread_id}/decide", data=form)
    reason = re.search(r'data-reason="([^"]+)"', reply.text)
    if reason:
        return ("refused", Refusal[reason.group(1).upper()])
    return ("applied" if 'class="outcome applied"' in reply.text else "pending", None)


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1)


def via_webhook(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """A signed ``interrupt.answered`` as the local inbox sends it: each answered action names
    its position (the others are left for later) and the digest of the request it showed."""
    names = [a["name"] for a in run.request["action_requests"]]
    items = [
        {"position": i, "name": names[i], "decision": d["type"], "decidedByName": who}
        | ({"editedArgs": d["edited_action"]["args"]} if d["type"] == "edit" else {})
        for i, d in enumerate(decisions)
        if d is not None
    ]
    data = {"id": run.interrupt_id, "externalId": f"approval-worker:{run.thread_id}"}
    body = json.dumps(
        {"type": "interrupt.answered", "data": {**data, "actionRequests": items, "digest": digest}}
    )
    site.counter += 1
    headers = svix_headers(body, secret=LOCAL_SECRET, msg_id=f"msg_rules_{site.counter}")
    reply = httpx.post(f"{site.url}/webhooks/local", content=body, headers=headers, timeout=30)
    answer = reply.json()
    if answer["status"] == "ignored":
        return ("refused", Refusal[answer["code"].upper()])
    return ("applied" if reply.status_code == 202 else "pending", None)


def via_slack(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """A signed press of the message's Approve button: Slack approves every action."""
    value = json.dumps({"t": run.thread_id, "i": run.interrupt_id, "d": digest})
    payload = {
        "type": "block_actions",
        "user": {"id": SLACK_USERS[who], "name": who},
        "actions": [{"action_id": "approve", "value": value, "type": "button"}],
    }
    body, headers = signed_interaction(payload, SIGNING)
    url = f"{site.url}/slack/interactions"
    return _refused(httpx.post(url, content=body, headers=headers, timeout=30))


class NoLink(Exception):
    """The reviewer was sent no e-mail for the request (the band is not theirs)."""


def via_email(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """The Approve link of the reviewer's e-mail about the run (it approves every action)."""
    mail.drain()
    found = site.box.to(f"{who}@example.test", run.thread_id)
    if not found:
        raise NoLink(f"no mail to {who} about {run.thread_id}")
    token = re.search(r"token=([^&\s]+)", links(found[-1])["approve"]).group(1)
    reply = httpx.post(f"{site.url}/email/decide", data={"token": token}, timeout=30)
    return _refused(reply)


def via_lg(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """A LangGraph client's resume on ``/lg``, by the interrupt's id, with the digest read."""
    resume = {run.interrupt_id: {"decisions": decisions, "digest": digest}}
    body = {"assistant_id": "refund", "command": {"resume": resume}}
    key = site.keys[who]["authorization"].removeprefix("Bearer ")
    url = f"{site.url}/lg/threads/{run.thread_id}/runs"
    return _refused(httpx.post(url, json=body, headers={"x-api-key": key}, timeout=30))


Source_ = Callable[[Site, Any, list, str, str], Verdict]
SOURCES: dict[str, Source_] = {
    "api": via_api,
    "page": via_page,
    "cli": via_cli,
    "webhook": via_webhook,
    "slack": via_slack,
    "email": via_email,
    "lg": via_lg,
    "sweep": via_sweep,
}
# sources that can answer some actions of a request only (the others approve the whole)
PARTS = {"api", "cli", "webhook", "lg", "sweep"}


# -- the attempts (rows): set the situation up, then the decisive step through ``via`` ---------

Step = Callable[[], Verdict]


def partial_past_authority(site: Site, name: str, via: Source_) -> Step:
    """sam, refused "approve everything" on A-1002 (329.00) + A-1005 (199.99), answers one
    action at a time (a source that cannot answer in parts approves the whole)."""
    run = site.start("Refund orders A-1002 and A-1005: both broken")
    whole = via_api(site, run, [APPROVE, APPROVE], "sam", run.request_digest)
    assert whole == ("refused", Refusal.AUTHORITY)
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
    assert last.request["action_requests"][0]["args"]["amount"] == "29.00"
    return lambda: via(site, last, [APPROVE], "sam", last.request_digest)


def stale_digest(site: Site, name: str, via: Source_) -> Step:
    """sam read A-1001's request (49.90, within his band); it changed under the same interrupt
    (45.00) before he decided: his decision names what he read, so it is stale."""
    run = site.start("Refund order A-1001: broken")
    mail.drain()  # his e-mail went out with what he read
    shown = run.request_digest
    changed = json.loads(json.dumps(run.request))
    changed["action_requests"][0]["args"]["amount"] = 45.0
    site.runner.store.db.execute(
        "UPDATE runs SET request = :r, request_digest = :d WHERE thread_id = :t",
        {"r": json.dumps(changed), "d": HitlRequest.parse(changed).digest(), "t": run.thread_id},
    )
    now = site.runner.runs.get(run.thread_id)
    return lambda: via(site, now, [APPROVE], "sam", shown)


ATTEMPTS: dict[Callable[[Site, str, Source_], Step], Refusal] = {
    partial_past_authority: Refusal.AUTHORITY,
    second_part_past_authority: Refusal.AUTHORITY,
    split_past_band: Refusal.AUTHORITY,
    stale_digest: Refusal.STALE,
}
# A reviewer is mailed only the requests of their band, and a link approves the whole request:
# sam gets no e-mail about a request past his band, so there is nothing to press.
NO_LINK = {("email", "partial_past_authority"), ("email", "second_part_past_authority")}
# A signed delivery's id is remembered whatever its answer (a redelivery is answered alike and
# never judged twice): the transport's receipt, not the decision's.
RECEIPTS = {"webhook": "webhook_deliveries"}


@pytest.mark.parametrize("attempt", list(ATTEMPTS), ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", list(SOURCES))
def test_every_source_refuses_every_attempt_alike_and_changes_nothing(site, name, attempt):
    step = attempt(site, name, SOURCES[name])
    site.settle()
    receipt = RECEIPTS.get(name)
    before = settled_tables(site.db_env)
    try:
        got = step()
    except NoLink:
        assert (name, attempt.__name__) in NO_LINK
    else:
        assert (name, attempt.__name__) not in NO_LINK
        assert got == ("refused", ATTEMPTS[attempt])
    site.settle()
    after = settled_tables(site.db_env)
    assert after | {receipt: ""} == before | {receipt: ""}


def test_what_one_person_approved_for_one_order_adds_up(site):
    """Within the band each time, past it in all: sam edits A-1002 down to 60.00 twice."""
    run = site.start("Refund order A-1002: it leaks")
    site.decide(run, [_edit("A-1002", "60.00")], "sam")
    again = site.start("Refund order A-1002: it leaks", fresh=False)
    refused = via_api(site, again, [_edit("A-1002", "60.00")], "sam", again.request_digest)
    assert refused == ("refused", Refusal.AUTHORITY)
    assert site.runner.needs(again) == "one of finance"  # the 269.00 left
