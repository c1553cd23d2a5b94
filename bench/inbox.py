"""The web inbox's queue page with many waiting runs, on Postgres; and its screenshots.

``uv run python -m bench.inbox`` starts uvicorn on a fresh Postgres schema, starts one real run
(its request is the template), bulk-inserts the rest of the waiting runs with one ``INSERT ...
SELECT`` (as bench/sweep.py does), signs a reviewer in through the login form, then times
``GET /inbox`` (the first page, most urgent first) and a deep keyset page. The floor is
``GET /healthz`` on the same server (one query): what the page costs beyond an HTTP round trip.
Target: the first page under 200 ms with 10,000 waiting.

``uv run python -m bench.inbox --screenshots docs`` instead writes every screenshot in the docs
(:data:`SHOTS`) with Debian's chromium: the inbox's (queue, request, approve with changes, a
quorum's diff, phone width) from a few real waiting runs, and the tutorial's by following
docs/tutorial.md itself (``testkit.tutorial``), and the ones the browser tests take as they
judge a page (``testkit.web.PHOTOGRAPHED``), so no picture drifts from the product.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import DEFAULT_PG, fresh_database
from testkit.databases import ROOT, api_key, worker_env
from testkit.servers import LOCAL_SECRET, start_server

TARGET_MS = 200.0

BULK_RUNS = """
INSERT INTO runs (thread_id, workflow, status, input, interrupt_id, graph_interrupt_ids, request,
                  attempts, created_at, updated_at, expires_at, requested_by, quorum,
                  request_digest, ladder_step)
SELECT 'bulk_' || g, 'refund', 'waiting', :input, 'bulk-' || g, :graph_interrupt_ids, :request,
       1, :now - g, :now - g, :now + 3600 + g, 'rita', 1, :request_digest, g % 3
FROM generate_series(1, :n) AS g
"""
TEMPLATE = "SELECT input, graph_interrupt_ids, request, request_digest FROM runs LIMIT 1"


def signed_in(url: str, headers: dict[str, str]) -> httpx.Client:
    """An httpx client holding a reviewer's session cookie, signed in through the form."""
    client = httpx.Client(base_url=url, timeout=30)
    page = client.get("/inbox/login").text
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token is not None
    credential = headers["authorization"].split(" ", 1)[1]
    reply = client.post(
        "/inbox/login", data={"csrf": token.group(1), "credential": credential, "next": "/inbox"}
    )
    if reply.status_code != 303:
        raise RuntimeError(f"sign-in failed: {reply.status_code} {reply.text[:300]}")
    return client


def _median_ms(client: httpx.Client, path: str, reps: int, expect: str) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        reply = client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        if reply.status_code != 200 or expect not in reply.text:
            raise RuntimeError(f"GET {path}: {reply.status_code} {reply.text[:300]}")
    return statistics.median(times)


def measure(waiting: int, reps: int, pg_base: str) -> dict[str, float]:
    from store.db import open_store
    from testkit.databases import pointed_at

    with tempfile.TemporaryDirectory() as tmp, fresh_database("postgres", Path(tmp), pg_base) as db:
        env = worker_env(db, WEBHOOK_SECRET=LOCAL_SECRET)
        server = start_server(env, Path(tmp) / "uvicorn.log", access_log=False)
        try:
            rita, bob = api_key(db, "rita", "requester"), api_key(db, "bob", "reviewer")
            body = {"input": "Refund order A-1001: broken", "thread_id": "real_1"}
            assert httpx.post(f"{server.url}/runs", headers=rita, json=body, timeout=60).is_success
            with pointed_at(db), open_store() as store:
                row = store.db.one(TEMPLATE)
                with store.db.transaction() as tx:
                    tx.execute(BULK_RUNS, {**row, "n": waiting - 1, "now": time.time()})
                store.db.execute("ANALYZE runs")
            client = signed_in(server.url, bob)
            _median_ms(client, "/inbox", 5, "Refund EUR")  # warm the templates and the pool
            first = _median_ms(client, "/inbox", reps, "Refund EUR")
            deep = f"/inbox?after={time.time() + 3600 + waiting - 100!r},bulk_{waiting - 100}"
            deep_ms = _median_ms(client, deep, reps, "Refund EUR")
            floor = _median_ms(client, "/healthz", reps, "ok")
        finally:
            server.stop()
    return {"first_ms": first, "deep_ms": deep_ms, "floor_ms": floor}


SHOTS = (
    "inbox-queue.png",
    "inbox-request.png",
    "inbox-approve-with-changes.png",
    "inbox-quorum-diff.png",
    "inbox-phone-queue.png",
    "inbox-phone-request.png",
)
TUTORIAL_SHOTS = ("tutorial-queue.png", "tutorial-approve-with-changes.png", "tutorial-done.png")


def tested_shots() -> tuple[str, ...]:
    """The pictures the browser tests take as they judge a page (``testkit.web.snapshot``)."""
    from testkit.web import PHOTOGRAPHED

    return tuple(PHOTOGRAPHED)


def tested_screenshots(out: Path) -> None:
    """Run the browser tests that photograph pages for the docs, writing into ``out``."""
    import os
    import subprocess
    import sys

    from testkit.web import PHOTOGRAPHED

    files = sorted(set(PHOTOGRAPHED.values()))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
    env = {"TEST_DATABASE_URL": DEFAULT_PG, **os.environ, "DOCS_SHOTS": str(out.resolve())}
    subprocess.run(command, env=env, check=True, cwd=ROOT)


def screenshots(out: Path) -> None:
    """The queue, a request, approve-with-changes, a quorum's diff and both pages at 375 px,
    from a few real waiting runs (SQLite), with Debian's chromium."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, fresh_database("sqlite", Path(tmp), "") as db:
        env = worker_env(
            db, WEBHOOK_SECRET=LOCAL_SECRET, REFUND_QUORUM_AMOUNT="500", REFUND_QUORUM="2"
        )
        server = start_server(env, Path(tmp) / "uvicorn.log")
        try:
            rita = api_key(db, "rita", "requester")
            alice, bob = api_key(db, "alice", "reviewer"), api_key(db, "bob", "reviewer")
            runs = [
                ("refund", "Refund order A-1004: the desk arrived wobbly"),
                ("refund", "Refund order A-1002: the machine leaks"),
                ("purchase-order", "Order 4 toner cartridges for CC-100: the printers are empty"),
                ("refund", "Refund order A-1005: one ear cup is dead"),
                ("refund", "Refund order A-1001: the kettle arrived broken"),
            ]
            ids = []  # the runs' ids: each chosen name in rita's namespace
            for i, (workflow, text) in enumerate(runs):
                body = {"input": text, "thread_id": f"thread_{i + 1:04d}", "workflow": workflow}
                reply = httpx.post(f"{server.url}/runs", headers=rita, json=body, timeout=60)
                ids.append(reply.json()["thread_id"])
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path="/usr/bin/chromium", args=["--no-sandbox"]
                )

                def person(headers: dict[str, str], width: int = 1280) -> Any:
                    page = browser.new_context(viewport={"width": width, "height": 800}).new_page()
                    page.goto(f"{server.url}/inbox")
                    page.fill("#credential", headers["authorization"].split(" ", 1)[1])
                    page.click("#sign-in")
                    page.wait_for_url(f"{server.url}/inbox")
                    return page

                first = person(alice)  # alice proposes a change on the 2-approver refund
                first.goto(f"{server.url}/inbox/requests/{ids[0]}")
                first.click("#edit-summary-0")
                first.fill("#a0-amount", "520")
                first.click("#approve-edit-0")
                first.wait_for_load_state()
                page = person(bob)
                page.screenshot(path=str(out / "inbox-queue.png"), full_page=True)
                page.goto(f"{server.url}/inbox/requests/{ids[2]}")
                page.screenshot(path=str(out / "inbox-request.png"), full_page=True)
                page.goto(f"{server.url}/inbox/requests/{ids[1]}")
                page.click("#edit-summary-0")
                page.fill("#a0-amount", "100")
                page.screenshot(path=str(out / "inbox-approve-with-changes.png"), full_page=True)
                page.goto(f"{server.url}/inbox/requests/{ids[0]}")
                page.screenshot(path=str(out / "inbox-quorum-diff.png"), full_page=True)
                phone = person(bob, 375)
                phone.screenshot(path=str(out / "inbox-phone-queue.png"), full_page=True)
                phone.goto(f"{server.url}/inbox/requests/{ids[1]}")
                phone.screenshot(path=str(out / "inbox-phone-request.png"), full_page=True)
                browser.close()
        finally:
            server.stop()
    tutorial_screenshots(out)
    tested_screenshots(out)


def tutorial_screenshots(out: Path) -> None:
    """The tutorial's pictures, taken as its steps are followed on a fresh directory."""
    from playwright.sync_api import sync_playwright

    from testkit.servers import free_port
    from testkit.tutorial import follow

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            reports = follow(Path(tmp) / "approval-tutorial", free_port(), browser, shots=out)
        finally:
            browser.close()
    gaps = [f"{r.title}: {r.gaps}" for r in reports if r.gaps]
    if gaps:
        raise RuntimeError(f"the tutorial did not show what it says: {gaps}")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.inbox", description=__doc__)
    p.add_argument("--waiting", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--pg", default=DEFAULT_PG)
    p.add_argument("--screenshots", type=Path, help="write the screenshots here instead")
    args = p.parse_args()
    if args.screenshots:
        screenshots(args.screenshots)
        print(f"wrote {', '.join(SHOTS + TUTORIAL_SHOTS + tested_shots())} in {args.screenshots}")
        return
    r = measure(args.waiting, args.reps, args.pg)
    verdict = "met" if r["first_ms"] < TARGET_MS else "MISSED"
    print(f"GET /inbox, {args.waiting:,} waiting, median of {args.reps}: {r['first_ms']:.1f} ms")
    print(f"  target < {TARGET_MS:.0f} ms: {verdict}")
    print(f"GET /inbox deep keyset page (near the end): {r['deep_ms']:.1f} ms")
    print(f"floor GET /healthz: {r['floor_ms']:.1f} ms")


if __name__ == "__main__":
    main()
