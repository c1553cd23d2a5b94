"""Identity people cannot fool (issue 32): names compare by their TR39 confusable skeleton after
NFKC and case folding, and a name that mixes scripts with look-alikes, holds an invisible mark or
renders blank is refused wherever it enters (a key, a JWT, a delegation, a webhook's decider).
What a look-alike, an invisible mark, a revoked key or a revoked delegator gets through each
source of decisions is a row of the one rule table, tests/test_rule_table.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from agent.ledger import Ledger
from core.errors import UserError
from core.identity import identity_key, same_identity
from core.limits import check_name
from store.db import open_store
from testkit import loopback
from testkit.databases import environment, fresh_database
from testkit.slack import SlackStandIn, link_slack, signed_command, signed_interaction
from testkit.tables import settled_tables as tables
from testkit.wait import until
from testkit.webapp import LOCAL_SECRET, api_key, sign, start_server, worker_env
from worker.runner import Runner

CYR_I, CYR_A = "\u0456", "\u0430"  # і а: Cyrillic look-alikes of Latin i and a

# (what someone tried, the name they used, whom it imitates)
IMITATIONS = [
    ("homoglyph requester", f"r{CYR_I}ta", "rita"),
    ("homoglyph quorum", f"{CYR_A}lice", "alice"),
    ("homoglyph delegate", f"fr{CYR_A}nk", "frank"),
    ("variation selector", "rita\ufe0f", "rita"),
    ("combining grapheme joiner", "bob\u034f", "bob"),
    ("zero-width space", "ri\u200bta", "rita"),
    ("fullwidth", "\uff52\uff49\uff54\uff41", "rita"),
    ("case", "RITA", "rita"),
    ("whole-script Cyrillic", "\u0455\u0430m", "sam"),
]

# names that render blank or hold an invisible or confusably mixed character
REFUSED = {
    "homoglyph": f"r{CYR_I}ta",
    "mixed Cyrillic a": f"{CYR_A}lice",
    "mixed delegate": f"fr{CYR_A}nk",
    "variation selector": "rita\ufe0f",
    "combining grapheme joiner": "bob\u034f",
    "zero-width space": "ri\u200bta",
    "hangul filler": "\u3164",
    "braille blank": "\u2800",
    "hangul choseong and jungseong fillers": "\u115f\u1160",
    "halfwidth hangul filler inside a name": "bo\uffa0b",
    "blank beside a name": "rita \u2800",
}

# real names in one script each (or CJK's usual mixes): accepted as typed
ACCEPTED = [
    "rita",
    "Rita Smith",
    "José Müller",
    "Мария",
    "Ελένη",
    "やまだ太郎",
    "김민준",
    "O’Brien",
]


@pytest.mark.parametrize(
    ("attempt", "name", "imitated"), IMITATIONS, ids=[a for a, *_ in IMITATIONS]
)
def test_an_imitation_is_the_same_identity(attempt, name, imitated):
    assert identity_key(name) == identity_key(imitated)
    assert same_identity(name, imitated)


@pytest.mark.parametrize("name", list(REFUSED.values()), ids=list(REFUSED))
def test_a_name_that_could_fool_a_reader_is_refused_where_it_enters(name):
    with pytest.raises(UserError) as refused:
        check_name(name, "a key's name")
    assert "U+" in str(refused.value) or "scripts" in str(refused.value)


@pytest.mark.parametrize("name", ACCEPTED)
def test_a_plain_name_in_one_script_is_accepted_and_keeps_its_spelling(name):
    assert check_name(name) == name


def test_printable_ascii_gets_the_answer_disarm_gives_without_asking_it():
    import itertools

    import disarm

    from core import identity

    def by_disarm(name: str) -> str | None:
        for char in name:
            if char != " " and not disarm.skeleton_key(char):
                return "invisible"
        if not identity_key(name):
            return "renders blank"
        if disarm.is_mixed_script(name, per_word=True) and disarm.is_confusable(name):
            return "mixes scripts"
        return None

    ascii_ = [chr(c) for c in range(0x20, 0x7F)]
    names = ["".join(t) for n in (1, 2) for t in itertools.product(ascii_, repeat=n)]
    names += ["Ada Lovelace", "o'brien-smith", "   x  ", "   ", "bob@example.com"]
    assert [identity.unclear(n) for n in names] == [by_disarm(n) for n in names]


def test_distinct_people_stay_distinct():
    assert not same_identity("alice", "alicia")
    assert not same_identity("Мария", "Maria")  # a real Cyrillic name is not its transliteration
    assert identity_key("rita") == "rita"  # lower-case ASCII is its own key: stored keys hold


def test_a_person_s_keys_are_found_by_identity_also_those_made_before_it_was_stored(store):
    """The sources that name a person (a webhook, a polled inbox, the CLI) find that person's
    keys by the indexed identity; a key an older release made has none until the next upgrade
    fills it, and is matched by its name meanwhile."""
    from store.keys import KeyStore, Role, fill_identities

    keys = KeyStore(store.db)
    keys.create("Rita", frozenset({Role.REVIEWER}), frozenset({"finance"}))
    keys.create("ace", frozenset({Role.REVIEWER}), frozenset({"support-leads"}))
    old, _ = keys.create("ace", frozenset({Role.REVIEWER}), frozenset({"ops"}))
    store.db.execute("UPDATE api_keys SET identity = NULL WHERE id = :id", {"id": old.id})

    assert keys.groups_of(f"r{CYR_I}ta") == {"finance"}  # a look-alike names the same person
    assert keys.groups_of("ACE") == {"support-leads", "ops"}  # the unfilled key counts too
    assert keys.groups_of("nobody") == frozenset()
    keys.revoke(old.id)
    assert keys.groups_of("ace") == {"support-leads"} and not keys.revoked_only("ace")

    with store.db.transaction() as tx:
        fill_identities(tx)
    assert store.db.one("SELECT identity FROM api_keys WHERE id = :id", {"id": old.id}) == {
        "identity": "ace"
    }
    assert store.db.all("SELECT id FROM api_keys WHERE identity IS NULL") == []


# -- every source, the same refusal, every table unchanged --------------------------------------

ACE_CYRILLIC = "\u0430\u0441\u0435"  # асе: all Cyrillic, one script, so it enters; it *is* ace
POLICY = {"SEPARATION_OF_DUTIES": "1", "REFUND_QUORUM_AMOUNT": "500", "REFUND_QUORUM": "2"}
SMALL = "Refund order A-1002: it leaks"  # 329.00
SIGNING = "slack-signing-secret-for-identity-tests"
ISSUER, AUDIENCE = "https://idp.identity.test", "approval-worker"
PEOPLE = {
    "rita": ("requester",),
    "ace": ("requester", "reviewer"),
    ACE_CYRILLIC: ("reviewer",),
    "bob": ("reviewer",),
    "carol": ("reviewer",),
    "frank": ("reviewer",),
    "sam": ("reviewer",),
    "olga": ("admin",),
}
SLACK_USERS = {"bob": "UBOB", "carol": "UCAROL", ACE_CYRILLIC: "UACE"}


@dataclass
class Site:
    url: str
    db_env: dict[str, str]
    runner: Runner
    keys: dict[str, dict[str, str]]
    signer: object
    counter: int = 0

    def settle(self, timeout: float = 30) -> None:
        until(
            lambda: (
                not self.runner.store.db.one(
                    "SELECT count(*) AS n FROM runs WHERE status IN ('running', 'resuming') "
                    "AND owner NOT LIKE 'handoff:%'"
                )["n"]
            ),
            "no run is being resumed in the server",
            timeout,
        )

    def start(self, text: str, requester: str = "rita") -> dict:
        self.settle()
        Ledger(self.runner.store.db).clear()  # the module's runs share the demo orders
        self.counter += 1
        body = {"input": text, "thread_id": f"t-identity-{self.counter}"}
        reply = loopback.post(
            f"{self.url}/runs", json=body, headers=self.keys[requester], timeout=60
        )
        assert reply.status_code == 201 and "approval" in reply.json(), reply.text
        return reply.json()

    def jwt(self, sub: str) -> dict[str, str]:
        import jwt

        claims = {"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 300}
        token = jwt.encode({**claims, "sub": sub, "roles": ["reviewer"]}, self.signer, "RS256")
        return {"authorization": f"Bearer {token}"}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    tmp = tmp_path_factory.mktemp(f"identity-{request.param}")
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    signer = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = signer.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    slack = SlackStandIn("xoxb-identity").start()
    env = {
        **POLICY,
        "SLACK_BOT_TOKEN": "xoxb-identity",
        "SLACK_SIGNING_SECRET": SIGNING,
        "SLACK_CHANNEL": "C0APPROVALS",
        "SLACK_API_URL": slack.url,
        "JWT_ISSUER": ISSUER,
        "JWT_AUDIENCE": AUDIENCE,
        "JWT_PUBLIC_KEY": public.decode(),
    }
    with fresh_database(request.param, tmp, pg) as db_env:
        server = start_server(worker_env(db_env, **env), tmp / "uvicorn.log")
        keys = {name: api_key(db_env, name, *roles) for name, roles in PEOPLE.items()}
        for who, user in SLACK_USERS.items():
            link_slack(server.url, keys[who], user, SIGNING)
        warm = {"input": SMALL, "thread_id": "t-warm"}  # LangGraph's first import is slow
        loopback.post(f"{server.url}/runs", json=warm, headers=keys["rita"], timeout=120)
        with environment({**db_env, **POLICY}), open_store() as store:
            yield Site(server.url, db_env, Runner(store), keys, signer)
        server.stop()
    slack.stop()


def _error(reply: httpx.Response) -> tuple[int, str]:
    error = reply.json()["error"]
    assert set(error) - {"details"} == {"code", "message"}, reply.text  # ids behind details
    return reply.status_code, error["code"]


def _body(run: dict, **extra) -> dict:
    approval = run["approval"]
    count = len(approval.get("action_requests") or [1])
    decisions = [{"type": "approve"}] * count
    return {
        "interrupt_id": approval["interrupt_id"],
        "digest": approval["digest"],
        "decisions": decisions,
        **extra,
    }


def via_api(site: Site, run: dict, headers: dict, **extra) -> tuple[int, str]:
    url = f"{site.url}/runs/{run['thread_id']}/decision"
    return _error(loopback.post(url, json=_body(run, **extra), headers=headers, timeout=30))


def via_webhook(site: Site, run: dict, name: str) -> tuple[int, str]:
    items = [{"name": "issue_refund", "decision": "approve", "decidedByName": name}]
    data = {
        "id": run["approval"]["interrupt_id"],
        "externalId": f"approval-worker:{run['thread_id']}",
        "actionRequests": items,
    }
    body = json.dumps({"type": "interrupt.answered", "data": data})
    site.counter += 1
    headers = sign(body, secret=LOCAL_SECRET, msg_id=f"msg_identity_{site.counter}")
    reply = loopback.post(f"{site.url}/webhooks/local", content=body, headers=headers, timeout=30)
    answer = reply.json()
    if answer.get("status") == "ignored":  # a refused delivery: 200, so the inbox stops retrying
        return 200, answer["code"]
    return reply.status_code, (answer.get("error") or {}).get("code", reply.text[:300])


def via_slack(site: Site, run: dict, slack_user: str) -> tuple[int, str]:
    approval = run["approval"]
    value = {"t": run["thread_id"], "i": approval["interrupt_id"], "d": approval["digest"]}
    payload = {
        "type": "block_actions",
        "user": {"id": slack_user, "username": "someone", "name": "someone"},
        "actions": [{"action_id": "approve", "value": json.dumps(value), "type": "button"}],
    }
    body, headers = signed_interaction(payload, SIGNING)
    reply = loopback.post(
        f"{site.url}/slack/interactions", content=body, headers=headers, timeout=30
    )
    return _error(reply)


def new_key(site: Site, name: str) -> tuple[int, str]:
    body = {"name": name, "roles": ["reviewer"]}
    return _error(
        loopback.post(f"{site.url}/keys", json=body, headers=site.keys["olga"], timeout=30)
    )


def delegate(site: Site, by: dict[str, str], to: str) -> httpx.Response:
    ends = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    body = {"delegate": to, "ends_at": ends}
    return loopback.post(f"{site.url}/me/delegations", json=body, headers=by, timeout=30)


HOMOGLYPH_RITA = f"r{CYR_I}ta"
# (attempt, source, what the source is handed) -> (status, code) it must answer; the run requested
# by rita (or by ace) stays waiting and no table changes
DUTIES = [
    ("homoglyph rіta", "key", lambda s, r: new_key(s, HOMOGLYPH_RITA), (422, "invalid")),
    (
        "homoglyph rіta",
        "jwt",
        lambda s, r: via_api(s, r, s.jwt(HOMOGLYPH_RITA)),
        (401, "unauthorized"),
    ),
    (
        "rita + U+FE0F",
        "jwt",
        lambda s, r: via_api(s, r, s.jwt("rita\ufe0f")),
        (401, "unauthorized"),
    ),
    ("blank U+3164", "key", lambda s, r: new_key(s, "\u3164"), (422, "invalid")),
    ("braille blank", "key", lambda s, r: new_key(s, "\u2800\u2800"), (422, "invalid")),
    (
        "U+115F U+1160",
        "webhook",
        lambda s, r: via_webhook(s, r, "\u115f\u1160"),
        (422, "invalid"),
    ),
    ("bob + U+034F", "key", lambda s, r: new_key(s, "bob\u034f"), (422, "invalid")),
    ("аlice", "key", lambda s, r: new_key(s, f"{CYR_A}lice"), (422, "invalid")),
]
# ace requested; асе (Cyrillic, one script: it enters) is ace to every rule. Through every source
# of decisions that is a row of tests/test_rule_table.py (and so are a look-alike filling a
# quorum, a revoked key and a revoked delegator); a JWT's subject is not a source of its own there
SAME_PERSON = [
    ("асе for ace", "jwt", lambda s, r: via_api(s, r, s.jwt("АСЕ")), (403, "duties")),
]


def _refused_and_unchanged(site: Site, run: dict, attempt, expected, source: str = "") -> None:
    """The attempt answers ``expected`` and changes no table (a signed delivery that is refused
    is remembered by its id, so that its retries are answered alike: that row alone moves)."""
    site.settle()
    before = tables(site.db_env)
    assert attempt(site, run) == expected
    site.settle()
    after = tables(site.db_env)
    if source == "webhook" and expected[0] == 200:
        before.pop("webhook_deliveries"), after.pop("webhook_deliveries")
    assert after == before
    assert site.runner.runs.get(run["thread_id"]).status == "waiting"


@pytest.mark.parametrize(
    ("what", "source", "attempt", "expected"), DUTIES, ids=[f"{w}-{s}" for w, s, *_ in DUTIES]
)
def test_a_name_that_imitates_the_requester_is_refused_by_every_source(
    site, what, source, attempt, expected
):
    _refused_and_unchanged(site, site.start(SMALL), attempt, expected, source)


@pytest.mark.parametrize(
    ("what", "source", "attempt", "expected"),
    SAME_PERSON,
    ids=[f"{w}-{s}" for w, s, *_ in SAME_PERSON],
)
def test_a_look_alike_of_the_requester_is_the_requester_on_every_source(
    site, what, source, attempt, expected
):
    _refused_and_unchanged(site, site.start(SMALL, requester="ace"), attempt, expected, source)


def test_a_delegation_to_a_look_alike_is_refused(site):
    before = tables(site.db_env)
    reply = delegate(site, site.keys["frank"], f"fr{CYR_A}nk")
    assert _error(reply) == (422, "invalid_delegate")
    assert tables(site.db_env) == before


def test_a_slack_link_is_never_claimed_by_someone_else(site):
    run = site.start(SMALL)
    before = tables(site.db_env)
    claimed = loopback.post(
        f"{site.url}/me/slack",
        json={"slack_user_id": "UCAROL"},
        headers=site.keys["sam"],
        timeout=30,
    )
    assert _error(claimed) == (409, "slack_linked")
    assert tables(site.db_env) == before
    # sam starts a link for a Slack user nobody linked; only that Slack user can confirm it
    started = loopback.post(
        f"{site.url}/me/slack", json={"slack_user_id": "UNEW"}, headers=site.keys["sam"], timeout=30
    )
    assert started.status_code == 202, started.text
    code = started.json()["confirm"].split()[-1]
    before = tables(site.db_env)
    body, headers = signed_command("USAM", f"link {code}", SIGNING)
    wrong = loopback.post(f"{site.url}/slack/commands", content=body, headers=headers, timeout=30)
    assert _error(wrong) == (403, "wrong_slack_user")
    assert tables(site.db_env) == before
    _refused_and_unchanged(site, run, lambda s, r: via_slack(s, r, "UNEW"), (403, "unlinked"))
    # the reverse: started in Slack, confirmed by the reviewer signed in to the product
    body, headers = signed_command("USAM", "link", SIGNING)
    asked = loopback.post(f"{site.url}/slack/commands", content=body, headers=headers, timeout=30)
    assert asked.status_code == 200, asked.text
    code = asked.json()["text"].split('"code": "')[1][:10]
    done = loopback.post(
        f"{site.url}/me/slack", json={"code": code}, headers=site.keys["sam"], timeout=30
    )
    assert done.json() == {"status": "linked", "slack_user_id": "USAM", "reviewer": "sam"}


def test_quota_and_rate_limits_count_a_person_not_a_spelling_or_a_key(site):
    from api.throttle import credential
    from store.ratelimits import open_runs

    site.start(SMALL)
    db = site.runner.store.db
    assert (
        open_runs(db, "RITA")
        == open_runs(db, "\uff52\uff49\uff54\uff41")
        == open_runs(db, "rita")
        >= 1
    )
    assert credential("Rita") == credential("rita") == credential("\uff52ita")  # one bucket


def test_a_slack_link_ends_only_when_its_own_reviewer_unlinks_it(site):
    carol = site.keys["carol"]
    before = tables(site.db_env)
    theirs = loopback.delete(f"{site.url}/me/slack/UCAROL", headers=site.keys["sam"], timeout=30)
    assert _error(theirs) == (404, "not_found")
    assert tables(site.db_env) == before
    mine = loopback.delete(f"{site.url}/me/slack/UCAROL", headers=carol, timeout=30)
    assert mine.json() == {"status": "unlinked", "slack_user_id": "UCAROL", "reviewer": "carol"}
    assert link_slack(site.url, carol, "UCAROL", SIGNING)["reviewer"] == "carol"  # linked again
