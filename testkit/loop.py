"""Slow resumes started from the web pages while ``/healthz`` is timed on the same process: the
shared part of ``tests/test_event_loop.py`` and the bench's ``loop`` section. A resume run on the
event loop holds up every other request, so ``/healthz`` (no query) is the thing to time.

The pages are driven over plain HTTP as a browser would: the sign-in form's double-submit token,
the ``aw_session`` cookie, and the session's CSRF token from a page.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from testkit import loopback
from testkit.databases import api_key, pointed_at

REQUEST = "Refund order A-1001: the kettle arrived broken"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class PageSession:
    """A signed-in browser session: its cookie and its CSRF token."""

    url: str
    cookie: str
    csrf: str

    def post(self, path: str, fields: dict[str, str]) -> httpx.Response:
        return loopback.post(
            f"{self.url}{path}",
            data={"csrf": self.csrf, **fields},
            cookies={"aw_session": self.cookie},
            timeout=120,
        )


def sign_in(url: str, authorization: dict[str, str]) -> PageSession:
    """Sign in at ``/inbox/login`` with an API key's ``Authorization`` header."""
    with httpx.Client(base_url=url, timeout=60) as client:
        login = client.get("/inbox/login")
        token = _CSRF.search(login.text)
        assert token, login.text
        credential = authorization["authorization"].split(" ", 1)[1]
        reply = client.post(
            "/inbox/login", data={"csrf": token[1], "next": "/inbox", "credential": credential}
        )
        assert reply.status_code == 303, reply.text
        cookie = client.cookies.get("aw_session", path="/inbox")
        assert cookie, "no session cookie"
        page = client.get("/inbox/runs")
        csrf = _CSRF.search(page.text)
        assert csrf, page.text
    return PageSession(url, cookie, csrf[1])


@dataclass
class Scene:
    """Waiting runs to decide from their pages, and one failed run for the operators' Retry."""

    url: str
    operator: dict[str, str]  # the API headers of a reviewer and operator, to poll runs
    page: PageSession
    waiting: list[dict] = field(default_factory=list)  # run views (thread id, approval)
    failed: str = ""


def set_scene(url: str, db_env: dict[str, str], decisions: int, tag: str) -> Scene:
    """``decisions`` waiting runs and one failed one, requested by rita and decided by olga.

    The demo's books start over: every scene refunds A-1001, which is refundable once."""
    from agent.ledger import Ledger
    from store.db import open_store

    with pointed_at(db_env), open_store() as store:
        Ledger(store.db).clear()
    rita = api_key(db_env, f"rita-{tag}", "requester")
    olga = api_key(db_env, f"olga-{tag}", "reviewer", "operator")
    scene = Scene(url, olga, sign_in(url, olga))
    for i in range(decisions + 1):
        thread_id = f"loop-{tag}-{i}"
        reply = loopback.post(
            f"{url}/runs", headers=rita, json={"input": REQUEST, "thread_id": thread_id}, timeout=60
        )
        assert reply.status_code == 201 and reply.json()["status"] == "waiting", reply.text
        scene.waiting.append(reply.json())
    scene.failed = scene.waiting.pop()["thread_id"]
    with pointed_at(db_env), open_store() as store:
        store.db.execute(
            "UPDATE runs SET status = 'failed', error = 'boom' WHERE thread_id = :t",
            {"t": scene.failed},
        )
    return scene


def _decide(scene: Scene, view: dict) -> httpx.Response:
    approval = view["approval"]
    fields = {
        "interrupt_id": approval["interrupt_id"],
        "digest": approval["digest"],
        "d0": "approve",
    }
    return scene.page.post(f"/inbox/requests/{view['thread_id']}/decide", fields)


def _retry(scene: Scene) -> httpx.Response:
    return scene.page.post(f"/inbox/runs/{scene.failed}/retry", {"back": "failed"})


def _settled(scene: Scene, timeout: float = 120) -> None:
    """Until every decided run is done and the retried one has paused again."""
    want = {v["thread_id"]: "done" for v in scene.waiting} | {scene.failed: "waiting"}
    deadline = time.monotonic() + timeout
    while want and time.monotonic() < deadline:
        for thread_id, status in list(want.items()):
            view = loopback.get(f"{scene.url}/runs/{thread_id}", headers=scene.operator).json()
            if view.get("status") == status:
                del want[thread_id]
        time.sleep(0.1)  # polls until every run settled (deadline above)
    assert not want, f"runs not settled in {timeout:.0f}s: {want}"


@dataclass
class Window:
    healthz: list[float]  # seconds per GET /healthz, in order
    seconds: float  # from the first post until every run settled
    replies: list[int]  # the posts' status codes: the decisions', then the retry's
    calls: list[tuple[float, float]] = field(default_factory=list)  # each call's wall-clock
    # (sent, answered), comparable with the events' ``at`` (the same machine's clock)


def healthz_while(
    url: str,
    work: Callable[[], object],
    gap: float = 0.01,
    calls: list[tuple[float, float]] | None = None,
) -> list[float]:
    """Time ``GET /healthz`` one after another (``gap`` apart) until ``work`` returns; each
    call's wall-clock (sent, answered) goes to ``calls`` when given."""
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)
        finally:
            done.set()

    samples = []
    worker = threading.Thread(target=run, daemon=True)
    with httpx.Client(base_url=url, timeout=30) as client:
        client.get("/healthz")  # open the connection before the clock starts
        worker.start()
        while not done.is_set():
            sent, t0 = time.time(), time.perf_counter()
            assert client.get("/healthz").status_code == 200
            samples.append(time.perf_counter() - t0)
            if calls is not None:
                calls.append((sent, time.time()))
            time.sleep(gap)  # paces the probes (a load shape, not a wait)
    worker.join()
    if failure:
        raise failure[0]
    return samples


def slow_resumes(scene: Scene) -> Window:
    """Post every decision and the Retry at once, each from its own thread, and time
    ``/healthz`` until all of them have finished resuming."""
    replies: list[int] = []

    def work() -> None:
        posts = [lambda v=v: _decide(scene, v) for v in scene.waiting] + [lambda: _retry(scene)]
        answers: list[httpx.Response | None] = [None] * len(posts)

        def send(i: int) -> None:
            answers[i] = posts[i]()

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(posts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        replies.extend(a.status_code if a is not None else 0 for a in answers)
        _settled(scene)

    t0 = time.monotonic()
    calls: list[tuple[float, float]] = []
    samples = healthz_while(scene.url, work, calls=calls)
    return Window(samples, time.monotonic() - t0, replies, calls)


def idle_healthz(url: str, count: int, gap: float = 0.01) -> list[float]:
    """``/healthz`` with nothing else running: the floor."""
    with httpx.Client(base_url=url, timeout=30) as client:
        client.get("/healthz")
        samples = []
        for _ in range(count):
            t0 = time.perf_counter()
            client.get("/healthz")
            samples.append(time.perf_counter() - t0)
            time.sleep(gap)  # paces the probes (a load shape, not a wait)
    return samples
