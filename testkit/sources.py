"""The decision sources of the "same result from every source" tables, each driven as in
production (real HTTP to a real uvicorn with an API key, a session and CSRF for the page, a Svix
signature for the webhook; the CLI's and the sweep's sources in process) and reduced to the
typed result it got, so tables in several test modules judge every source alike."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from core.hitl import HitlRequest
from inbox.base import Approval
from testkit import loopback
from testkit.servers import LOCAL_SECRET, svix_headers
from testkit.tables import reset_books
from worker.cli import answer_request
from worker.decisions import Applied, Pending
from worker.refusals import Refusal, Refused
from worker.runner import Runner


@dataclass
class Site:
    url: str
    runner: Runner
    keys: dict[str, dict[str, str]]
    counter: int = 0

    def settle(self, timeout: float = 30) -> None:
        """Wait until no run is queued or being resumed in the server (its resumer takes every
        queued claim, the command line's too)."""
        deadline = time.monotonic() + timeout
        busy = "SELECT count(*) AS n FROM runs WHERE status IN ('running', 'resuming')"
        while self.runner.store.db.one(busy)["n"] and time.monotonic() < deadline:
            time.sleep(0.05)  # polls until no resume is in flight (deadline above)

    def start(self, text: str, requester: str = "rita", expires_in: str | None = None) -> dict:
        # the module's runs share the five demo orders: the books start again before each one
        # (and again if an earlier run's resume refunded the order meanwhile: nothing to propose)
        for _ in range(5):
            self.counter += 1
            self.settle()  # earlier resumes finish before the books start again
            reset_books(self.runner.store.db)
            body: dict = {"input": text, "thread_id": f"t-path-{self.counter}"}
            if expires_in:
                body["expires_in"] = expires_in
            reply = loopback.post(
                f"{self.url}/runs", json=body, headers=self.keys[requester], timeout=30
            )
            assert reply.status_code == 201, reply.text
            if "approval" in reply.json() or "A-1" not in text:
                break
        return reply.json()


# -- each source, reduced to the typed result it got -------------------------------------------


def typed(kind: str, detail: object = None) -> tuple:
    return (kind, detail)


def code(name: str) -> tuple:
    return typed("refused", Refusal[name.upper()])


def via_api(site: Site, run: dict, decisions: list[dict], who: str, **override: str) -> tuple:
    body = {
        "interrupt_id": run["approval"]["interrupt_id"],
        "digest": run["approval"]["digest"],
        "decisions": decisions,
        **override,
    }
    reply = loopback.post(
        f"{site.url}/runs/{run['thread_id']}/decision",
        json=body,
        headers=site.keys[who],
        timeout=30,
    )
    if reply.status_code >= 400:
        return code(reply.json()["error"]["code"])
    answer = reply.json()
    if answer["status"] == "approval recorded":
        return typed("pending", answer["approvers"])
    return typed("applied")


def page_session(site: Site, who: str) -> httpx.Client:
    client = httpx.Client(base_url=site.url, follow_redirects=False, timeout=30)
    page = client.get("/inbox/login")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    credential = site.keys[who]["authorization"].removeprefix("Bearer ")
    signed_in = client.post(
        "/inbox/login", data={"csrf": token, "next": "/inbox", "credential": credential}
    )
    assert signed_in.status_code == 303, signed_in.text
    return client


def via_page(site: Site, run: dict, decisions: list[dict], who: str, **override: str) -> tuple:
    client = page_session(site, who)
    try:
        page = client.get(f"/inbox/requests/{run['thread_id']}").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        form = {
            "csrf": csrf,
            "interrupt_id": override.get("interrupt_id", run["approval"]["interrupt_id"]),
            "digest": override.get("digest", run["approval"]["digest"]),
        }
        for i, decision in enumerate(decisions):
            form[f"d{i}"] = decision["type"]
            if decision["type"] == "edit":
                for name, value in decision["edited_action"]["args"].items():
                    form[f"a{i}.{name}"] = str(value)
            if decision.get("message"):
                form[f"reason{i}"] = decision["message"]
        reply = client.post(f"/inbox/requests/{run['thread_id']}/decide", data=form)
    finally:
        client.close()
    reason = re.search(r'data-reason="([^"]*)"', reply.text)
    if reply.status_code == 422 and 'class="outcome invalid"' in reply.text:
        return code("invalid")  # a field the form itself refused
    if reason and reason.group(1):
        return code(reason.group(1))
    if reply.status_code == 404:
        return code("unknown_run")
    if 'class="outcome pending"' in reply.text:
        names = re.search(r"approvers \(([^)]*)\)", reply.text).group(1)
        return typed("pending", names.split(", "))
    assert 'class="outcome applied"' in reply.text, reply.text[:2000]
    return typed("applied")


def via_cli(site: Site, run: dict, decisions: list[dict], who: str, **override: str) -> tuple:
    request_id = override.get("interrupt_id", run["approval"]["interrupt_id"])
    try:
        result = answer_request(site.runner, request_id, lambda _: decisions, who)
    except Refused as exc:  # an unknown request id names no run
        result = exc
    return result_of(result)


def via_webhook(site: Site, run: dict, decisions: list[dict], who: str, **override: str) -> tuple:
    items = []
    for decision in decisions:
        item = {"name": "issue_refund", "decision": decision["type"], "decidedByName": who}
        if decision["type"] == "edit":
            item["editedArgs"] = decision["edited_action"]["args"]
        if "message" in decision:
            item["responseText"] = decision["message"]
        items.append(item)
    body = json.dumps(
        {
            "type": "interrupt.answered",
            "data": {
                "id": override.get("interrupt_id", run["approval"]["interrupt_id"]),
                "externalId": f"approval-worker:{run['thread_id']}",
                "actionRequests": items,
            },
        }
    )
    site.counter += 1
    headers = svix_headers(body, secret=LOCAL_SECRET, msg_id=f"msg_path_{site.counter}")
    reply = loopback.post(f"{site.url}/webhooks/local", content=body, headers=headers, timeout=30)
    answer = reply.json()
    if reply.status_code == 202:
        return typed("applied")
    if answer["status"] == "approval recorded":
        return typed("pending", answer["approvers"])
    return code(answer["code"])


def answered(
    thread_id: str, interrupt_id: str, decisions: list, who: str, digest: str | None = None
) -> Approval:
    """An inbox's answer as the sweep reads it when it polls (``digest``: the request as an
    inbox that holds it exactly says it showed)."""
    now = time.time()
    return Approval(
        id=interrupt_id,
        external_id=f"approval-worker:{thread_id}",
        title="",
        description="",
        request=HitlRequest(()),
        args_schemas={},
        status="answered",
        decisions=decisions,
        created_at=now,
        answered_at=now,
        approvers=[who],
        digest=digest,
    )


def via_sweep(site: Site, run: dict, decisions: list[dict], who: str, **override: str) -> tuple:
    """What the sweep makes of an inbox's answer (an external inbox, polled)."""
    iid = override.get("interrupt_id", run["approval"]["interrupt_id"])
    answer = answered(run["thread_id"], iid, decisions, who)
    decision = site.runner.sweeper.decision_of(run["thread_id"], answer)
    result = site.runner.decide(decision)
    if isinstance(result, Applied):  # as the sweep does: it resumes what it claimed
        site.runner.resume_claimed(result.run)
    return result_of(result)


def result_of(result: Applied | Pending | Refused) -> tuple:
    if isinstance(result, Refused):
        return typed("refused", result.reason)
    if isinstance(result, Pending):
        return typed("pending", result.approvers)
    return typed("applied")


SOURCES: dict[str, Callable[..., tuple]] = {
    "api": via_api,
    "page": via_page,
    "cli": via_cli,
    "webhook": via_webhook,
    "sweep": via_sweep,
}
APPROVE = [{"type": "approve"}]


def edit_to(amount: float, order: str = "A-1004") -> list[dict]:
    args = {"order_id": order, "amount": amount, "reason": "partial"}
    return [{"type": "edit", "edited_action": {"name": "issue_refund", "args": args}}]
