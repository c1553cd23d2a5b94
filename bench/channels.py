"""Section 13: channels that never make a person wait (issue 37).

(a) ``approval.requested`` with webhook, Slack and e-mail all on and a mail server that takes
:data:`MAIL_SECONDS` per message: runs are started through the worker on Postgres (the process
that pauses sends, one sender per channel), a steady few per second; the figure is from the
event's own ``timestamp`` (the pause's commit) to its arrival at a local webhook receiver, and
the same for the Slack post at the local Slack stand-in. Two reviewers with an address each get
a message per request, so the mail lane falls minutes behind on purpose.

(b) A Slack acknowledgement during a sweep of :data:`SWEPT` waiting runs on SQLite: the runs
(half overdue, half due for a reminder and an escalation) are written in bulk, one ``recover.py``
pass sweeps them in its own process, and meanwhile signed Reject presses on other waiting runs
go to ``uvicorn webhook:app`` one after another (Reject: every run can be decided, where the
demo order has refund left for one approval only); the figure is each press's HTTP round trip.
A probe takes SQLite's write lock every 20 ms to show how long a writer waited for it.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx

from bench.common import (
    REQUEST_TEXT,
    ROOT,
    Figure,
    Section,
    child_env,
    fresh_database,
    median,
    percentile,
)
from bench.http import start_server
from testkit.databases import environment as environ
from testkit.mail import MailBox
from testkit.receiver import Receiver
from testkit.slack import SlackStandIn, link_slack, press, signed_interaction

TARGET_S = 1.0  # both figures, p99 (issue 37)
MAIL_SECONDS = 2.0
SWEPT = 10_000
TOKEN = "xoxb-bench-channels"
SIGNING = "slack-signing-secret-for-the-bench"
ADDRESSES = ("bob@example.test", "carol@example.test")
WINDOW = 604800.0

# Bulk waiting runs for SQLite (no generate_series there): odd ones overdue (the sweep expires
# them), even ones past both ladder points (it reminds and escalates them), all their own rows.
_SERIES = "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :n)"
BULK_REQUESTS = f"""
{_SERIES}
INSERT INTO inbox_requests (id, external_id, dedupe_key, title, description, request,
                            args_schemas, status, created_at)
SELECT 'bulk-' || n, 'approval-worker:bulk_' || n, 'bulk_' || n || '-bench', :title,
       :description, :request, :args_schemas, 'pending', :now - :window
FROM g
"""
BULK_RUNS = f"""
{_SERIES}
INSERT INTO runs (thread_id, workflow, status, input, interrupt_id, graph_interrupt_ids,
                  request, attempts, created_at, updated_at, expires_at, ladder_at)
SELECT 'bulk_' || n, 'refund', 'waiting', :input, 'bulk-' || n, :graph_interrupt_ids, :request,
       1, :now - 0.9 * :window, :now - 0.9 * :window,
       CASE n % 2 WHEN 1 THEN :now - 60 ELSE :now + 0.1 * :window END, :now - 1
FROM g
"""
TEMPLATE = """
SELECT r.input, r.graph_interrupt_ids, r.request, i.title, i.description, i.args_schemas
FROM runs r JOIN inbox_requests i ON i.id = r.interrupt_id WHERE r.thread_id = :thread_id
"""


def _slack_env(stand_in: SlackStandIn) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING,
        "SLACK_CHANNEL": "C0APPROVALS",
        "SLACK_API_URL": stand_in.url,
    }


def _mail_env(box: MailBox) -> dict[str, str]:
    return {
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(box.port),
        "SMTP_TLS": "none",
        "EMAIL_FROM": "Approvals <approvals@example.test>",
        "EMAIL_LINK_SECRET": "link-secret-for-the-channels-bench-0123456789",
        "PUBLIC_URL": "https://approvals.example.test",
    }


def _thread_of(message: dict) -> str | None:
    import json

    for block in message.get("blocks") or []:
        for element in block.get("elements") or []:
            if element.get("action_id") == "approve":
                return str(json.loads(element["value"])["t"])
    return None


def requested(tmp: Path, pg_base: str, count: int, rate: float) -> dict:
    """(a): ``count`` pauses at ``rate`` per second; seconds from each event to its arrival."""
    from inbox.outbox import FLUSHER
    from store.db import open_store
    from store.keys import KeyStore, parse_roles
    from worker.runner import Runner

    receiver, stand_in = Receiver(keep_alive=True).start(), SlackStandIn(TOKEN).start()
    box = MailBox(delay=MAIL_SECONDS).start()
    env = {"NOTIFY_URLS": receiver.url, **_slack_env(stand_in), **_mail_env(box)}
    tag = uuid.uuid4().hex[:6]
    try:
        with fresh_database("postgres", tmp, pg_base) as db_env, environ({**db_env, **env}):
            with open_store() as store:
                for i, address in enumerate(ADDRESSES):
                    KeyStore(store.db).create(f"rev{i}", parse_roles(["reviewer"]), email=address)
                runner = Runner(store)
                runner.start(REQUEST_TEXT, thread_id=f"chw_{tag}")  # warm the graph and pool
                FLUSHER.wait(5)
                threads = []
                for i in range(count):
                    t0 = time.perf_counter()
                    threads.append(runner.start(REQUEST_TEXT, thread_id=f"ch_{tag}_{i}").thread_id)
                    time.sleep(max(0.0, 1 / rate - (time.perf_counter() - t0)))
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and _arrived(receiver, threads) < len(threads):
                    time.sleep(0.05)  # the last webhooks on their way (bounded above)
                hook = _webhook_latencies(receiver, threads)
                paused = {t: at for t, at in hook["paused"].items()}
                slack = [
                    float(ts) - paused[t]
                    for ts, m in list(stand_in.messages.items())
                    if (t := _thread_of(m)) in paused
                ]
                mailed = len(box.received)
                box.stop()  # the mail backlog fails fast from here: the sweep would retry it
                FLUSHER.wait(60)
    finally:
        box.stop()
        stand_in.stop()
        receiver.stop()
    return {"webhook": hook["latencies"], "slack": slack, "mailed": mailed, "count": count}


def _arrived(receiver: Receiver, threads: list[str]) -> int:
    wanted = set(threads)
    return sum(
        1
        for r in list(receiver.got)
        if r.json["type"] == "approval.requested" and r.json["data"]["thread_id"] in wanted
    )


def _webhook_latencies(receiver: Receiver, threads: list[str]) -> dict:
    wanted, paused, latencies = set(threads), {}, []
    for got in list(receiver.got):
        event = got.json
        if event["type"] != "approval.requested" or event["data"]["thread_id"] not in wanted:
            continue
        at = datetime.fromisoformat(event["timestamp"]).timestamp()
        paused[event["data"]["thread_id"]] = at
        latencies.append(got.at - at)
    return {"paused": paused, "latencies": latencies}


def _bulk(db, template_thread: str, count: int) -> None:
    row = db.one(TEMPLATE, {"thread_id": template_thread})
    params = {**row, "n": count, "now": time.time(), "window": WINDOW}
    with db.transaction() as tx:
        tx.execute(BULK_REQUESTS, params)
        tx.execute(BULK_RUNS, params)


class LockProbe:
    """Takes SQLite's write lock (and lets it go) every few ms; the longest wait for it."""

    def __init__(self, path: str) -> None:
        self.path, self.waits, self._stop = path, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        while not self._stop.is_set():
            t0 = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            self.waits.append(time.perf_counter() - t0)
            self._stop.wait(0.02)
        conn.close()

    def __enter__(self) -> LockProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(70)


def acknowledged(tmp: Path, swept: int, presses: int) -> dict:
    """(b): Slack presses, one after another, while ``recover.py`` sweeps ``swept`` runs."""
    from ops import slack
    from store.db import open_store
    from store.keys import KeyStore, parse_roles
    from worker.runner import Runner

    stand_in = SlackStandIn(TOKEN).start()
    env = _slack_env(stand_in)
    tag = uuid.uuid4().hex[:6]
    server = None
    try:
        with fresh_database("sqlite", tmp, "") as db_env, environ({**db_env, **env}):
            with open_store() as store:
                _, token = KeyStore(store.db).create("bob", parse_roles(["reviewer"]))
                runner = Runner(store)
                threads = [
                    runner.start(REQUEST_TEXT, thread_id=f"ack_{tag}_{i}").thread_id
                    for i in range(presses)
                ]
                slack.drain()
                _bulk(store.db, threads[0], swept)
            by_thread = {_thread_of(m): m for m in stand_in.messages.values()}
            server = start_server("webhook:app", child_env(db_env, **env), tmp / "ack.log")
            link_slack(server.url, {"authorization": f"Bearer {token}"}, "UBOB", SIGNING)
            url = f"{server.url}/slack/interactions"
            sweep_env = child_env(db_env, **env)
            ack, late, started = [], 0, time.perf_counter()
            with LockProbe(db_env["SQLITE_PATH"]) as probe, httpx.Client(timeout=30) as client:
                sweeper = subprocess.Popen(
                    [sys.executable, "recover.py"], cwd=ROOT, env=sweep_env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                time.sleep(0.5)  # let the sweep open its database and start writing
                for thread_id in threads:
                    if sweeper.poll() is not None:
                        break
                    payload = press(by_thread[thread_id], "reject", "UBOB",
                                    stand_in.response_url(thread_id))  # fmt: skip
                    body, headers = signed_interaction(payload, SIGNING)
                    t0 = time.perf_counter()
                    got = client.post(url, content=body, headers=headers)
                    ack.append(time.perf_counter() - t0)
                    if got.status_code != 200:
                        raise RuntimeError(f"press refused: {got.status_code} {got.text}")
                    late += got.json().get("status") == "acknowledged"
                    time.sleep(0.1)
                sweeper.wait(600)
                took = time.perf_counter() - started
            told = len(stand_in.responses)
    finally:
        if server is not None:
            server.stop()
        stand_in.stop()
    return {"ack": ack, "late": late, "told": told, "sweep_s": took, "lock": probe.waits}


def measure(
    tmp: Path, pg_base: str, *, count: int, rate: float, swept: int, presses: int
) -> Section:
    from core import settings

    section = Section("channels")
    a = requested(tmp, pg_base, count, rate)
    hook_p99, slack_p99 = percentile(a["webhook"], 99), percentile(a["slack"], 99)
    section.figures.append(
        Figure("channels", "approval.requested at the webhook, p99 (mail 2 s/message)",
               hook_p99, TARGET_S, "s", hook_p99 / TARGET_S, f"< {TARGET_S:g} s",
               hook_p99 < TARGET_S and len(a["webhook"]) == a["count"],
               f"{len(a['webhook'])}/{a['count']} arrived; p50 {median(a['webhook']):.3f} s")
    )  # fmt: skip
    section.figures.append(
        Figure("channels", "the request's Slack post, p99 (mail 2 s/message)",
               slack_p99, TARGET_S, "s", slack_p99 / TARGET_S, f"< {TARGET_S:g} s",
               slack_p99 < TARGET_S and len(a["slack"]) == a["count"],
               f"{len(a['slack'])}/{a['count']} posted; p50 {median(a['slack']):.3f} s")
    )  # fmt: skip
    section.details.append(
        f"- (a) {a['count']} pauses at {rate:g}/s on Postgres, webhook + Slack + e-mail on, "
        f"2 reviewers mailed per request by a server taking {MAIL_SECONDS:g} s per message: "
        f"webhook p50 {median(a['webhook']) * 1000:.0f} ms, p99 {hook_p99 * 1000:.0f} ms, max "
        f"{max(a['webhook'], default=0) * 1000:.0f} ms; Slack post p50 "
        f"{median(a['slack']) * 1000:.0f} ms, p99 {slack_p99 * 1000:.0f} ms; meanwhile the mail "
        f"lane delivered {a['mailed']} of {2 * a['count']} messages (it is minutes behind, alone)"
    )
    b = acknowledged(tmp, swept, presses)
    ack_p99 = percentile(b["ack"], 99)
    longest = max(b["lock"], default=0.0)
    section.figures.append(
        Figure("channels", f"Slack acknowledgement p99 during a sweep of {swept:,} (SQLite)",
               ack_p99, TARGET_S, "s", ack_p99 / TARGET_S, f"< {TARGET_S:g} s",
               ack_p99 < TARGET_S and len(b["ack"]) > 0,
               f"{len(b['ack'])} presses; {b['late']} answered 'acknowledged', decided after")
    )  # fmt: skip
    section.details.append(
        f"- (b) {swept:,} waiting runs on SQLite (half overdue, half due for a reminder and an "
        f"escalation), one `recover.py` pass ({b['sweep_s']:.1f} s with the presses); "
        f"{len(b['ack'])} signed presses one after another meanwhile: acknowledgement p50 "
        f"{median(b['ack']) * 1000:.0f} ms, p99 {ack_p99 * 1000:.0f} ms, max "
        f"{max(b['ack'], default=0) * 1000:.0f} ms (SLACK_ACK_SECONDS "
        f"{settings.SLACK_ACK_SECONDS.get():g}); {b['late']} acknowledged before their decision "
        f"could write and finished after; {b['told']} outcomes told through response_url; the "
        f"longest wait for SQLite's write lock seen by a probe during the sweep was "
        f"{longest * 1000:.0f} ms"
    )
    return section
