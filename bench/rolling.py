"""Section 14: a rolling restart under a steady load of decisions, on Postgres.

One app (``approval-worker serve``: uvicorn and its resumer process) and one sweeper
(``approval-worker recover --forever --retry-failed``) take signed ``interrupt.answered``
deliveries at a steady rate, well under capacity. Two phases of the same length: first with no
restart (the load's own stall: if it is large, the load is too high for the machine and the
restart figure would measure a queue, not a restart), then with every process restarted once in
turn by SIGTERM (the sweeper, then the app). Stop-then-start (default): each new process
started as soon as the old one has exited, as systemd's ``restart`` does; ``--rolling-surge``:
the new app started and healthy on another port before the old one gets SIGTERM, the sender
moving to it (a Deployment's rolling update behind a Service).

The sender behaves like a webhook provider: a refused connection or a 5xx is retried every
half second until the delivery is accepted (202). Figures: the longest stall of any run, from
the decision accepted to its run ``done`` (``updated_at``, the server's clock on this machine);
runs lost (accepted, not done by the end); runs doubled (more than one refund in the ledger or
more than one ``finished`` transition).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.common import (
    ROOT,
    SECRET,
    Figure,
    Section,
    child_env,
    fresh_database,
    waiting_runs,
)
from bench.http import answered_body
from testkit.databases import environment as environ
from testkit.servers import HOST, free_port

COMMAND = str(ROOT / ".venv" / "bin" / "approval-worker")
PATH = "/webhooks/vigilator"
STALL_TARGET = 10.0  # seconds, issue 36
RETRY_EVERY = 0.5  # the sender's pause before trying a refused delivery again


@dataclass
class Delivery:
    thread_id: str
    interrupt_id: str
    due: float  # seconds after the phase's start
    first_sent: float = 0.0  # wall clock of the first attempt
    accepted: float = 0.0  # wall clock of the 202 (0: never accepted)
    attempts: int = 0
    statuses: list[str] = field(default_factory=list)


class Process:
    """One long-running worker process, its output in a log file, stopped by SIGTERM."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path, port: int = 0):
        self.name, self.argv, self.env, self.logs, self.port = name, argv, env, logs, port
        self.proc: subprocess.Popen | None = None
        self.generation = 0

    def successor(self, port: int) -> Process:
        """The same program on another port (a surge Pod beside the old one)."""
        argv = [str(port) if a == str(self.port) else a for a in self.argv]
        new = Process(self.name, argv, self.env, self.logs, port)
        new.generation = self.generation
        return new

    def start(self) -> None:
        self.generation += 1
        log = open(self.logs / f"{self.name}.{self.generation}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.logs
        )

    def stop(self, timeout: float = 60) -> tuple[int, float]:
        """SIGTERM; the exit code and how long it took to exit."""
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return code, time.monotonic() - t0


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://{HOST}:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(app: Process, port: int, timeout: float = 180) -> float:
    """Seconds until the app answers ``/healthz`` (polled: a loaded machine starts slowly)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if app.proc is not None and app.proc.poll() is not None:
            raise RuntimeError(f"the app exited while starting (see {app.logs})")
        if _healthy(port):
            return time.monotonic() - t0
        time.sleep(0.1)  # polls until /healthz answers (deadline above)
    raise RuntimeError(f"the app did not answer /healthz in {timeout:.0f}s")


def _signed(body: str, msg_id: str) -> dict[str, str]:
    from datetime import UTC, datetime

    from svix.webhooks import Webhook

    at = datetime.now(UTC)
    return {
        "content-type": "application/json",
        "svix-id": msg_id,
        "svix-timestamp": str(int(at.timestamp())),
        "svix-signature": Webhook(SECRET).sign(msg_id, at, body),
    }


async def _send(port: list[int], deliveries: list[Delivery], give_up: float) -> None:
    """Each delivery at its due time, retried until accepted or ``give_up`` seconds late."""
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.2
    async with httpx.AsyncClient(timeout=30) as client:

        async def one(d: Delivery) -> None:
            await asyncio.sleep(max(0.0, start + d.due - loop.time()))
            body = answered_body(d.interrupt_id, d.thread_id)
            d.first_sent = time.time()
            while loop.time() < start + d.due + give_up:
                d.attempts += 1
                try:
                    reply = await client.post(
                        f"http://{HOST}:{port[0]}{PATH}",  # where the Service points now
                        content=body,
                        headers=_signed(body, f"roll_{d.thread_id}"),
                    )
                    d.statuses.append(str(reply.status_code))
                    if reply.status_code == 202:
                        d.accepted = time.time()
                        return
                except httpx.HTTPError as exc:
                    d.statuses.append(type(exc).__name__)
                await asyncio.sleep(RETRY_EVERY)

        await asyncio.gather(*(one(d) for d in deliveries))


def send_in_background(
    port: list[int], deliveries: list[Delivery], give_up: float
) -> threading.Thread:
    thread = threading.Thread(
        target=lambda: asyncio.run(_send(port, deliveries, give_up)), daemon=True
    )
    thread.start()
    return thread


def _finished(db, ids: list[str]) -> dict[str, float]:
    rows = db.all(
        "SELECT thread_id, updated_at FROM runs WHERE status = 'done' AND thread_id = ANY(:ids)",
        {"ids": ids},
    )
    return {r["thread_id"]: float(r["updated_at"]) for r in rows}


def wait_done(db, ids: list[str], timeout: float) -> dict[str, float]:
    """The runs done by ``timeout`` (polled; the rest are counted lost)."""
    t0 = time.monotonic()
    done = _finished(db, ids)
    while len(done) < len(ids) and time.monotonic() - t0 < timeout:
        time.sleep(0.25)  # polls until every accepted run is done (deadline above)
        done = _finished(db, ids)
    return done


def doubled(db, ids: list[str]) -> list[str]:
    """Runs with more than one refund or more than one ``finished`` transition."""
    refunds = db.all(
        "SELECT thread_id, count(*) AS n FROM refunds WHERE thread_id = ANY(:ids) "
        "GROUP BY thread_id HAVING count(*) > 1",
        {"ids": ids},
    )
    finished = db.all(
        "SELECT thread_id, count(*) AS n FROM run_events WHERE thread_id = ANY(:ids) "
        "AND reason = 'finished' GROUP BY thread_id HAVING count(*) > 1",
        {"ids": ids},
    )
    return sorted({r["thread_id"] for r in refunds} | {r["thread_id"] for r in finished})


@dataclass
class Phase:
    name: str
    sent: int
    accepted: int
    lost: list[str]
    doubled: list[str]
    stalls: list[float]  # accepted -> done, seconds
    waits: list[float]  # first attempt -> done, seconds
    events: list[str]


def phase(
    name: str,
    db,
    runs: list[tuple[str, str]],
    rate: float,
    procs: dict[str, Process],
    port: list[int],
    restart_at: list[tuple[float, str]],
    surge: bool,
) -> Phase:
    deliveries = [Delivery(t, i, n / rate) for n, (t, i) in enumerate(runs)]
    duration = len(runs) / rate
    t0 = time.monotonic()
    sender = send_in_background(port, deliveries, give_up=120)
    events = []
    for at, which in restart_at:
        time.sleep(max(0.0, t0 + at - time.monotonic()))  # the schedule's next restart
        if surge and which == "app":  # a Deployment's rolling update: the new Pod first
            old = procs["app"]
            new = old.successor(free_port())
            new.start()
            ready = wait_healthy(new, new.port)
            port[0] = new.port  # the Service's endpoints move to the ready Pod
            code, took = old.stop()
            procs["app"] = new
            events.append(
                f"app: new one healthy after {ready:.1f} s, then the old one SIGTERM, "
                f"exited {code} after {took:.1f} s"
            )
            continue
        code, took = procs[which].stop()
        procs[which].start()
        ready = wait_healthy(procs[which], port[0]) if which == "app" else 0.0
        events.append(
            f"{which} SIGTERM at {at:g} s: exited {code} after {took:.1f} s"
            + (f", new one healthy {ready:.1f} s later" if which == "app" else ", new one started")
        )
    sender.join(timeout=duration + 180)
    accepted = [d for d in deliveries if d.accepted]
    ids = [d.thread_id for d in accepted]
    done = wait_done(db, ids, 180)
    return Phase(
        name,
        len(deliveries),
        len(accepted),
        [t for t in ids if t not in done],
        doubled(db, [d.thread_id for d in deliveries]),
        [done[d.thread_id] - d.accepted for d in accepted if d.thread_id in done],
        [done[d.thread_id] - d.first_sent for d in accepted if d.thread_id in done],
        events,
    )


def measure(
    tmp: Path, pg_base: str, *, rate: float, duration: float, surge: bool = False
) -> Section:
    from store.db import open_store
    from worker.runner import Runner

    section = Section("rolling")
    count = int(rate * duration)
    tag = uuid.uuid4().hex[:6]
    port = free_port()
    with fresh_database("postgres", tmp, pg_base) as db_env:
        env = child_env(db_env, LOG_FORMAT="json")
        env.pop("PYTHONPATH", None)  # the installed command, as the recipes run it
        subprocess.run([COMMAND, "migrate"], env=env, check=True, capture_output=True)
        with environ(db_env), open_store() as store:
            runner = Runner(store)
            calm = waiting_runs(runner, count, f"calm_{tag}")
            roll = waiting_runs(runner, count, f"roll_{tag}")
            procs = {
                "app": Process("app", [COMMAND, "serve", "--port", str(port)], env, tmp, port),
                "sweeper": Process(
                    "sweeper",
                    [COMMAND, "recover", "--forever", "--retry-failed", "--interval", "1"],
                    env,
                    tmp,
                ),
            }
            for p in procs.values():
                p.start()
            try:
                wait_healthy(procs["app"], port)
                target = [port]
                # the sweeper first, then the app: a new app takes most of a minute to start on a
                # loaded machine, and its old one must stop while the load still runs
                restarts = [(duration / 4, "sweeper"), (duration / 3, "app")]
                name = "rolling restart" + (" (surge)" if surge else "")
                phases = [
                    phase("no restart", store.db, calm, rate, procs, target, [], surge),
                    phase(name, store.db, roll, rate, procs, target, restarts, surge),
                ]
            finally:
                for p in procs.values():
                    p.stop()
    for ph in phases:
        worst = max(ph.stalls, default=float("nan"))
        restarted = bool(ph.events)
        section.figures += [
            Figure(
                "rolling",
                f"longest stall, decision accepted to done, {ph.name} @ {rate:g}/s",
                worst,
                float("nan"),
                "s",
                float("nan"),
                f"< {STALL_TARGET:g} s",
                worst < STALL_TARGET,
                f"{ph.accepted} of {ph.sent} accepted; longest from first attempt "
                f"{max(ph.waits, default=float('nan')):.1f} s",
            ),
            Figure(
                "rolling",
                f"runs lost / doubled, {ph.name}",
                float(len(ph.lost) + len(ph.doubled)),
                0.0,
                "",
                float("nan"),
                "0",
                not ph.lost and not ph.doubled and ph.accepted == ph.sent,
                f"lost {len(ph.lost)}, doubled {len(ph.doubled)}, never accepted "
                f"{ph.sent - ph.accepted}",
            ),
        ]
        section.details.append(
            f"- {ph.name}: {ph.sent} decisions at {rate:g}/s over {duration:g} s, "
            f"{ph.accepted} accepted; stall (accepted to done) max {worst:.2f} s, p50 "
            f"{sorted(ph.stalls)[len(ph.stalls) // 2] if ph.stalls else float('nan'):.2f} s; "
            f"lost {len(ph.lost)}, doubled {len(ph.doubled)}"
            + ("; " + "; ".join(ph.events) if restarted else "")
        )
        section.facts[f"{ph.name.replace(' ', '_')}_max_stall_s"] = worst
    section.details.append(
        "- processes: `approval-worker serve` (1 worker, with its resumer process; "
        + (
            "surge: the new app healthy before the old one is stopped"
            if surge
            else "stop-then-start"
        )
        + ") and `approval-worker recover --forever --retry-failed --interval 1`; the "
        f"sender retries a refused delivery every {RETRY_EVERY:g} s; load average "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
    return section
