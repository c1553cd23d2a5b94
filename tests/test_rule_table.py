"""One rule table: every source of decisions (the API, the web inbox, the inbox CLI, a signed
webhook, Slack, an e-mail link, a LangGraph client on ``/lg``, the sweep polling an inbox) x
every attempt to get past a rule gets the same refusal, and every table is left as it was.

The rows are attempts: a function that sets a run up as the rule's situation needs (through the
one decision path, in process) and returns the decisive step, made through the source under test;
the expected refusal is the row's. A rule added later adds a row here and every source is held
to it. A cell where a source cannot make the attempt says why, in :data:`NO_LINK` (nothing to
press), :data:`EQUIVALENT` (what the attempt is there, and its refusal) or
:data:`NOT_APPLICABLE`: never silently. The app runs in this process under uvicorn on
127.0.0.1 (real HTTP, real Svix and Slack signatures, real SMTP); the CLI and the sweep are
driven in process.

The authority matrix: support leads approve up to 100.00, finance above; a refund over 500.00
needs two approvers, and nobody approves a run they requested. sam is a support lead, fay is in
finance; rita requests. ace requests and is in finance; асе (all Cyrillic: one script, so the
name enters) is ace to every rule. Keys stored before names were checked (the upgrade guide:
migration 20) may hold a look-alike that mixes scripts or an invisible mark: :data:`LEGACY`.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from api.app import create_app
from core.hitl import HitlRequest
from ops import mail
from store.keys import INSERT_KEY, KeyStore, parse_groups, parse_roles
from store.states import Status
from testkit import loopback
from testkit.databases import TEST_RATE_LIMITS, TEST_SERVER, environment, fresh_database
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
ACE_CYRILLIC = "\u0430\u0441\u0435"  # асе
PEOPLE = {
    "sam": ("support-leads",),
    "fay": ("finance",),
    "rita": (),
    "ace": ("finance",),
    ACE_CYRILLIC: ("support-leads", "finance"),
    "mallory": ("support-leads",),
}
# stored before migration 20 checked names where they enter (never made so today): a look-alike
# of rita mixing scripts (Cyrillic і), rita + U+FE0F, fay + U+034F
RITA_MIXED, RITA_MARKED, FAY_MARKED = "r\u0456ta", "rita\ufe0f", "fay\u034f"
LEGACY = {
    RITA_MIXED: ("support-leads",),
    RITA_MARKED: ("support-leads",),
    FAY_MARKED: ("finance",),
}
SLACK_USERS = {
    "sam": "USAM",
    "fay": "UFAY",
    "ace": "UACE",
    ACE_CYRILLIC: "UACECYR",
    RITA_MIXED: "URITAMIX",
    RITA_MARKED: "URITAFE0F",
    FAY_MARKED: "UFAY034F",
}
POLICY = {"SEPARATION_OF_DUTIES": "1", "REFUND_QUORUM_AMOUNT": "500", "REFUND_QUORUM": "2"}
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
    slack: dict[str, str] = field(default_factory=lambda: dict(SLACK_USERS))
    csrf: dict[str, str] = field(default_factory=dict)  # each session's token, read at sign-in
    once: dict[str, Any] = field(default_factory=dict)  # set-ups a row makes once per site

    def person(self, name: str, groups: tuple[str, ...], legacy: bool = False) -> None:
        """A reviewer with a key (one stored as before names were checked, ``legacy``), an
        e-mail address, a Slack user linked from both sides and a signed-in page session."""
        if legacy:
            self.keys[name] = stored_before_checks(self.runner, name, groups, email_of(name))
        else:
            roles, email = parse_roles(["reviewer"]), email_of(name)
            _, token = KeyStore(self.runner.store.db).create(
                name, roles, parse_groups(groups), email
            )
            self.keys[name] = {"authorization": f"Bearer {token}"}
        self.slack.setdefault(name, f"U{hashlib.sha256(name.encode()).hexdigest()[:10].upper()}")
        link_slack(self.url, self.keys[name], self.slack[name], SIGNING)
        self.pages[name], self.csrf[name] = signed_in(self.url, self.keys[name])

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

    def start(self, text: str, fresh: bool = True, requester: str = "rita") -> Any:
        """A refund run, requested by ``requester``, waiting on its approval; ``fresh``: the
        books (and what each person approved) start over first."""
        self.settle()
        if fresh:
            reset_books(self.runner.store.db)
        self.counter += 1
        thread_id = f"t-table-{self.counter}"
        outcome = self.runner.start(text, thread_id=thread_id, requested_by=requester)
        assert outcome.status == "waiting", outcome
        run = self.runner.runs.get(thread_id)
        self.shown[thread_id] = run.request_digest
        return run

    def decide(self, run: Any, decisions: list[dict | None], who: str, **kw: Any) -> Any:
        """A decision through the path in process (a set-up step, not the one under test);
        an applied one is resumed to its end, as the sweep would."""
        d = Decision.read(
            decisions,
            thread_id=run.thread_id,
            interrupt_id=run.interrupt_id,
            approvers=[who],
            source=Source.SWEEP,
            **kw,
        )
        result = self.runner.decide(d)
        assert not isinstance(result, Refused), result
        if isinstance(result, Applied):  # resumed here, or by the app's resumer if it came first
            self.runner.resume_claimed(result.run)
            until(lambda: self.runner.runs.get(run.thread_id).status in ("done", "waiting"),
                  f"{run.thread_id} resumed")  # fmt: skip
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
        # a press waits for its decision as long as Slack allows, so a loaded machine does not
        # answer `acknowledged` before the refusal the cell is about (the default is 0.3 s)
        "SLACK_ACK_SECONDS": TEST_SERVER["SLACK_ACK_SECONDS"],
    }
    with fresh_database(request.param, tmp, pg) as db_env:
        env = {**db_env, **TEST_RATE_LIMITS, **channels, **POLICY, "AUTHORITY_FILE": str(matrix)}
        with environment(env):
            app = create_app()
            with serve_app(app) as url:
                runner: Runner = app.state.runner
                store = KeyStore(runner.store.db)
                keys = {}
                for name, groups in PEOPLE.items():
                    roles = ["requester"] if name == "rita" else ["reviewer"]
                    roles += ["requester"] if name == "ace" else []
                    email = None if name == "mallory" else email_of(name)  # she only claims
                    _, token = store.create(name, parse_roles(roles), parse_groups(groups), email)
                    keys[name] = {"authorization": f"Bearer {token}"}
                site = Site(url, runner, db_env, keys, box)
                for name in SLACK_USERS:
                    if name in LEGACY:
                        site.person(name, LEGACY[name], legacy=True)
                    else:  # each reviewer's Slack user, proven from both sides
                        link_slack(url, keys[name], SLACK_USERS[name], SIGNING)
                        site.pages[name], site.csrf[name] = signed_in(url, keys[name])
                yield site
                for client in site.pages.values():
                    client.close()
    slack.stop()
    box.stop()


# -- each source: (site, run, decisions, who, digest) -> ("refused", reason) or what happened --

Verdict = tuple[str, Any]


def reason(code: str) -> Refusal | str:
    """A refusal's code as the enum's reason; a code of the transport's own (a Slack link
    refused) as it is."""
    return Refusal.__members__.get(code.upper(), code)


def _refused(reply: httpx.Response) -> Verdict:
    if reply.status_code >= 400:
        return ("refused", reason(reply.json()["error"]["code"]))
    status = reply.json()["status"]
    assert status != "acknowledged", "Slack's 200 came before the decision: its outcome is unread"
    return ("pending" if status == "approval recorded" else "applied", None)


def via_api(site: Site, run: Any, decisions: list, who: str, digest: str, **kw: str) -> Verdict:
    """``POST /runs/{id}/decision`` with the reviewer's key (``on_behalf_of``: for whom)."""
    body = {"interrupt_id": run.interrupt_id, "digest": digest, "decisions": decisions, **kw}
    url = f"{site.url}/runs/{run.thread_id}/decision"
    return _refused(loopback.post(url, json=body, headers=site.keys[who], timeout=30))


def via_cli(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """``python -m inbox decide --by WHO``, in process: it decides on the local inbox's copy."""
    try:
        return result_of(answer_request(site.runner, run.interrupt_id, lambda _: decisions, who))
    except Refused as refused:  # raised where the command line reads the name it was given
        return ("refused", refused.reason)


def via_sweep(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """The sweep's source, given an inbox's answer (an inbox polled)."""
    answer = answered(run.thread_id, run.interrupt_id, decisions, who, digest)
    return result_of(site.runner.decide(site.runner.sweeper.decision_of(run.thread_id, answer)))


def signed_in(url: str, headers: dict[str, str]) -> tuple[httpx.Client, str]:
    """A browser session on the web inbox, signed in with the reviewer's key, and its CSRF
    token (as its first page has it)."""
    client = httpx.Client(base_url=url, follow_redirects=False, timeout=30)
    login = client.get("/inbox/login").text
    credential = headers["authorization"].removeprefix("Bearer ")
    form = {"csrf": _csrf(login), "next": "/inbox", "credential": credential}
    signed = client.post("/inbox/login", data=form)
    assert signed.status_code == 303, signed.text[:500]
    return client, _csrf(client.get("/inbox").text)


def via_page(site: Site, run: Any, decisions: list, who: str, digest: str, **kw: str) -> Verdict:
    """The web inbox's request page: its form decides every action (``on_behalf_of``: the
    form's "decide for" choice). A session the server no longer honours is sent to sign in."""
    client = site.pages[who]
    page = client.get(f"/inbox/requests/{run.thread_id}")
    csrf = _csrf(page.text) if page.status_code == 200 else site.csrf[who]
    form = {"csrf": csrf, "interrupt_id": run.interrupt_id, "digest": digest, **kw}
    form |= {f"d{i}": "approve" for i in range(len(decisions))}
    reply = client.post(f"/inbox/requests/{run.thread_id}/decide", data=form)
    if reply.status_code == 303 and "/inbox/login" in reply.headers["location"]:
        return ("refused", Refusal.UNAUTHORIZED)  # the page's 401: sign in again
    found = re.search(r'data-reason="([^"]+)"', reply.text)
    if found:
        return ("refused", Refusal[found.group(1).upper()])
    return ("applied" if 'class="outcome applied"' in reply.text else "pending", None)


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1)


def via_webhook(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """A signed ``interrupt.answered`` as the local inbox sends it: each answered action names
    its position (the others are left for later) and the digest of the request it showed."""
    names = [a["name"] for a in run.request.to_json()["action_requests"]]
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
    reply = loopback.post(f"{site.url}/webhooks/local", content=body, headers=headers, timeout=30)
    answer = reply.json()
    if reply.status_code == 422 and answer["error"]["code"] == "invalid":
        return ("refused", Refusal.INVALID)  # a decider's name no person can be told apart by
    if answer["status"] == "ignored":
        return ("refused", Refusal[answer["code"].upper()])
    return ("applied" if reply.status_code == 202 else "pending", None)


def via_slack(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """A signed press of the message's Approve button: Slack approves every action."""
    value = json.dumps({"t": run.thread_id, "i": run.interrupt_id, "d": digest})
    payload = {
        "type": "block_actions",
        "user": {"id": site.slack[who], "name": who},
        "actions": [{"action_id": "approve", "value": value, "type": "button"}],
    }
    body, headers = signed_interaction(payload, SIGNING)
    url = f"{site.url}/slack/interactions"
    return _refused(loopback.post(url, content=body, headers=headers, timeout=30))


class NoLink(Exception):
    """The reviewer was sent no e-mail for the request (the band is not theirs)."""


def via_email(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """The Approve link of the reviewer's e-mail about the run (it approves every action)."""
    mail.drain()
    found = site.box.to(email_of(who), run.thread_id)
    if not found:
        raise NoLink(f"no mail to {who} about {run.thread_id}")
    token = re.search(r"token=([^&\s]+)", links(found[-1])["approve"]).group(1)
    reply = loopback.post(f"{site.url}/email/decide", data={"token": token}, timeout=30)
    return _refused(reply)


def via_lg(site: Site, run: Any, decisions: list, who: str, digest: str) -> Verdict:
    """A LangGraph client's resume on ``/lg``, by the interrupt's id, with the digest read."""
    resume = {run.interrupt_id: {"decisions": decisions, "digest": digest}}
    body = {"assistant_id": "refund", "command": {"resume": resume}}
    key = site.keys[who]["authorization"].removeprefix("Bearer ")
    url = f"{site.url}/lg/threads/{run.thread_id}/runs"
    return _refused(loopback.post(url, json=body, headers={"x-api-key": key}, timeout=30))


def email_of(name: str) -> str:
    """A person's address: their name, or for a name outside ASCII its code points."""
    if name.isascii() and name.isalnum():
        return f"{name}@example.test"
    local = "u" + "-".join(f"{ord(c):x}" for c in name)
    return f"{local}@example.test"


def stored_before_checks(
    runner: Runner, name: str, groups: tuple[str, ...], email: str
) -> dict[str, str]:
    """A reviewer's key as a release before migration 20 stored it: its name unchecked (it may
    mix scripts or hold an invisible mark) and without an identity (migration 25 fills it on
    upgrade; until then it is matched by its name); the same statement, digest and token form."""
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    values = {
        "id": key_id,
        "name": name,
        "identity": None,
        "digest": hashlib.sha256(secret.encode()).hexdigest(),
        "roles": "reviewer",
        "groups": ",".join(sorted(groups)),
        "email": email,
        "now": time.time(),
    }
    runner.store.db.execute(INSERT_KEY, values)
    return {"authorization": f"Bearer aw_{key_id}_{secret}"}


Source_ = Callable[..., Verdict]
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
    assert last.request.to_json()["action_requests"][0]["args"]["amount"] == "29.00"
    return lambda: via(site, last, [APPROVE], "sam", last.request_digest)


def stale_digest(site: Site, name: str, via: Source_) -> Step:
    """sam read A-1001's request (49.90, within his band); it changed under the same interrupt
    (45.00) before he decided: his decision names what he read, so it is stale."""
    run = site.start("Refund order A-1001: broken")
    mail.drain()  # his e-mail went out with what he read
    shown = run.request_digest
    changed = json.loads(json.dumps(run.request.to_json()))
    changed["action_requests"][0]["args"]["amount"] = 45.0
    site.runner.store.db.execute(
        "UPDATE runs SET request = :r, request_digest = :d WHERE thread_id = :t",
        {"r": json.dumps(changed), "d": HitlRequest.parse(changed).digest(), "t": run.thread_id},
    )
    now = site.runner.runs.get(run.thread_id)
    return lambda: via(site, now, [APPROVE], "sam", shown)


def homoglyph_duties(site: Site, name: str, via: Source_) -> Step:
    """ace requested A-1001 (49.90); асе, all Cyrillic and so a name that enters, approves it:
    to separation of duties it is ace approving his own run."""
    run = site.start("Refund order A-1001: broken", requester="ace")
    return lambda: via(site, run, [APPROVE], ACE_CYRILLIC, run.request_digest)


def mixed_script_duties(site: Site, name: str, via: Source_) -> Step:
    """rita requested A-1001; rіta (Cyrillic і, a key stored before names were checked)
    approves it: a name mixing scripts with a look-alike identifies nobody."""
    run = site.start("Refund order A-1001: broken")
    return lambda: via(site, run, [APPROVE], RITA_MIXED, run.request_digest)


def invisible_duties(site: Site, name: str, via: Source_) -> Step:
    """rita requested A-1001; rita + U+FE0F (a variation selector: it renders as rita)
    approves it."""
    run = site.start("Refund order A-1001: broken")
    return lambda: via(site, run, [APPROVE], RITA_MARKED, run.request_digest)


def homoglyph_quorum(site: Site, name: str, via: Source_) -> Step:
    """A-1004 (540.00) needs two approvers from finance; ace approved; асе is the second."""
    run = site.start("Refund order A-1004: wobbly")
    assert site.runner.needs(run) == "2 approvers, each one of finance"
    site.decide(run, [APPROVE], "ace")
    return lambda: via(site, run, [APPROVE], ACE_CYRILLIC, run.request_digest)


def invisible_quorum(site: Site, name: str, via: Source_) -> Step:
    """A-1004 again: fay approved; fay + U+034F (a combining grapheme joiner, invisible) is
    the second."""
    run = site.start("Refund order A-1004: wobbly")
    site.decide(run, [APPROVE], "fay")
    return lambda: via(site, run, [APPROVE], FAY_MARKED, run.request_digest)


def revoked_key(site: Site, name: str, via: Source_) -> Step:
    """A support lead's key is revoked after the request reached them (their e-mail sent, their
    Slack user linked, their page open): the holder decides A-1001 through the source. Where
    the source names people rather than authenticating them (the CLI, a webhook, a polled
    inbox) the name is theirs, and every key of theirs is revoked."""
    site.counter += 1
    who = f"rex{site.counter}"
    site.person(who, ("support-leads",))
    run = site.start("Refund order A-1001: broken")
    mail.drain()  # their e-mail went out while the key was valid
    key_id = site.keys[who]["authorization"].split("_")[1]
    KeyStore(site.runner.store.db).revoke(key_id)
    return lambda: via(site, run, [APPROVE], who, run.request_digest)


def _frank_delegated_to_sam_then_revoked(site: Site) -> None:
    """frank (finance) lends his authority to sam with his key, which is then revoked."""
    if "frank" in site.once:
        return
    roles, groups = parse_roles(["reviewer"]), parse_groups(["finance"])
    key, token = KeyStore(site.runner.store.db).create("frank", roles, groups, None)
    ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3 * 86400))
    made = loopback.post(
        f"{site.url}/me/delegations",
        json={"delegate": "sam", "ends_at": ends},
        headers={"authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    KeyStore(site.runner.store.db).revoke(key.id)
    site.once["frank"] = key.id


def revoked_delegator(site: Site, name: str, via: Source_) -> Step:
    """A-1002 (329.00) is finance's; sam decides it for frank, whose delegation to him was
    granted with a key since revoked. Sources that cannot name whom one decides for:
    :data:`EQUIVALENT`."""
    _frank_delegated_to_sam_then_revoked(site)
    run = site.start("Refund order A-1002: it leaks")
    kw = {"on_behalf_of": "frank"} if name in FOR_SOMEONE else {}
    return lambda: via(site, run, [APPROVE], "sam", run.request_digest, **kw)


def claimed_slack_link(site: Site, name: str, via: Source_) -> Step:
    """mallory, a reviewer, claims sam's Slack user id for herself (``POST /me/slack``): a
    proven link is never replaced, so she is refused and that user's presses stay sam's."""
    claim = {"slack_user_id": site.slack["sam"]}
    headers = site.keys["mallory"]
    url = f"{site.url}/me/slack"
    return lambda: _refused(loopback.post(url, json=claim, headers=headers, timeout=30))


ATTEMPTS: dict[Callable[[Site, str, Source_], Step], Refusal | str] = {
    partial_past_authority: Refusal.AUTHORITY,
    second_part_past_authority: Refusal.AUTHORITY,
    split_past_band: Refusal.AUTHORITY,
    stale_digest: Refusal.STALE,
    homoglyph_duties: Refusal.DUTIES,
    mixed_script_duties: Refusal.INVALID,
    invisible_duties: Refusal.INVALID,
    homoglyph_quorum: Refusal.REPEATED,
    invisible_quorum: Refusal.INVALID,
    revoked_key: Refusal.UNAUTHORIZED,
    revoked_delegator: Refusal.DELEGATION,
    claimed_slack_link: "slack_linked",
}
# sources where a decision names whom it is taken for (a delegation's delegator)
FOR_SOMEONE = {"api", "page"}
# A reviewer is mailed only the requests of their band, and a link approves the whole request:
# sam gets no e-mail about a request past his band, so there is nothing to press. Nor is anyone
# who is the requester to separation of duties (асе is ace, rіta and rita + U+FE0F are rita).
NO_LINK = {
    ("email", "partial_past_authority"),
    ("email", "second_part_past_authority"),
    ("email", "revoked_delegator"),
    ("email", "homoglyph_duties"),
    ("email", "mixed_script_duties"),
    ("email", "invisible_duties"),
}
# The attempt as a source that cannot make it as such makes it, and the refusal it gets.
EQUIVALENT: dict[tuple[str, str], Refusal] = {
    # no way to say "for frank": sam decides as himself, and his own band refuses 329.00 (the
    # delegation, live or not, never counts through these)
    **{(s, "revoked_delegator"): Refusal.AUTHORITY for s in ("cli", "webhook", "slack", "lg")},
    ("sweep", "revoked_delegator"): Refusal.AUTHORITY,
}
# Cells with no such attempt, and why.
NOT_APPLICABLE = {
    **{
        (s, "claimed_slack_link"): why
        for s, why in {
            "api": "the decider is the API key's holder; no field of a request names another",
            "lg": "the decider is the API key's holder; no field of a request names another",
            "page": "the session is made from the reviewer's own key; no form field names another",
            "email": "a link is signed for one key and reviewer and decides as them, whoever "
            "opens it; nothing names another person",
            "cli": "the operator at the machine names the decider (--by): the shell's user is "
            "trusted with the local inbox, and there is no link to claim",
            "webhook": "the inbox names its decider and signs the event: what it proves is the "
            "inbox's word, not a person's credential (docs: signed webhooks)",
            "sweep": "the polled inbox names its decider: its word, as for a webhook",
        }.items()
    },
}
# A signed delivery's id is remembered whatever its answer (a redelivery is answered alike and
# never judged twice): the transport's receipt, not the decision's.
RECEIPTS = {"webhook": "webhook_deliveries"}


@pytest.mark.parametrize("attempt", list(ATTEMPTS), ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", list(SOURCES))
def test_every_source_refuses_every_attempt_alike_and_changes_nothing(site, name, attempt):
    cell = (name, attempt.__name__)
    if cell in NOT_APPLICABLE:
        pytest.skip(NOT_APPLICABLE[cell])
    step = attempt(site, name, SOURCES[name])
    site.settle()
    receipt = RECEIPTS.get(name)
    before = settled_tables(site.db_env)
    try:
        got = step()
    except NoLink:
        assert cell in NO_LINK
    else:
        assert cell not in NO_LINK
        assert got == ("refused", EQUIVALENT.get(cell, ATTEMPTS[attempt]))
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
