"""Resumer processes: the resumes an app process hands off run in child processes of its own
(``RESUME_PROCESSES``), so an acknowledgement never shares an interpreter (its GIL) with a
graph segment.

A claim is committed and leased under its owner string before the answer goes out, and any
process may resume it under that owner (the lease thread renews by owner). So the app only
sends the claimed row to a child, which opens its own store and ``Runner`` from the same
settings and resumes it on ``RESUME_THREADS`` threads: the same code as the in-process threads,
another interpreter. Notifications the done transition owes are sent by the child's own outbox
sender; counters it keeps go back to the app (``ops.metrics.forward_to``) unless
``PROMETHEUS_MULTIPROC_DIR`` sums every process's.

The app keeps the queue: a child is sent at most as many runs as it has threads, and asks for
more as each finishes. So a child still starting (imports, pool) just leaves them queued, and a
child that dies loses only the runs it was resuming, which stay leased for the sweep to take
over when the lease runs out; the watcher thread starts a new child, which serves the rest.
Children are started with *spawn* (never a fork of a threaded process). Stopping: the queue is
drained to the children, each is told to stop with the time the app has left
(``core.shutdown``: ``SHUTDOWN_SECONDS`` from SIGTERM), finishes what it took in that time or
hands it back (its lease released, so a sweeper takes it at once) and exits; runs still queued
are handed back by the app, and a child still there after :data:`HAND_BACK_SECONDS` more is
terminated.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from core import settings, shutdown
from core.errors import one_line
from core.logs import request_id, thread_id
from store.states import Run

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

log = logging.getLogger(__name__)

START_SECONDS = 30.0  # how long start-up waits for the children to be ready (then serves anyway)
HAND_BACK_SECONDS = 3.0  # past the stop's deadline, how long a child has to hand back and exit
RESTART_SECONDS = 1.0  # least time between two starts of one child, doubled (to a minute) while
# children die before they are ready (a database that refuses them, say)


def processes() -> int:
    """How many resumer processes an app process starts: ``RESUME_PROCESSES``, else 1 on
    Postgres and 0 (threads of the app) on SQLite, where one writer at a time gains nothing
    from a second process; always 0 in serverless mode, which resumes inline."""
    if settings.serverless():
        return 0
    value = settings.RESUME_PROCESSES.get()
    if value is None:
        return 1 if settings.DATABASE_URL.get() else 0
    return value


class _Child:
    """One resumer process as the app sees it: its pipe, free threads and the runs it took."""

    def __init__(self, slot: int, ctx: Any, threads: int, forward: bool) -> None:
        self.slot = slot
        ours, theirs = ctx.Pipe()
        self.process = ctx.Process(
            target=serve, args=(theirs, threads, forward), name=f"resumer-{slot}", daemon=True
        )
        self.process.start()
        theirs.close()  # the child's end lives in the child only: its death reads as EOF here
        self.conn: Connection = ours
        self.started = time.monotonic()
        self.free = 0  # threads the child has said are ready
        self.taken: dict[str, Run] = {}
        self.stopping = False  # told to stop
        self.gone = False  # exited (its pipe read to the end)
        self.replaced = False
        self.ready = False  # said it serves


class Resumers:
    """The app side: the queue, the children, and the watcher thread that reads their pipes."""

    def __init__(self, count: int, threads: int) -> None:
        import multiprocessing  # here: the serverless path never loads it

        from ops import metrics

        self._ctx = multiprocessing.get_context("spawn")
        self._threads = threads
        # counters go back to the app when it keeps them alone (no multiprocess directory)
        self._forward = metrics.enabled() and not settings.PROMETHEUS_MULTIPROC_DIR.get()
        self._lock = threading.Lock()
        self._queue: deque[tuple[Run, str | None]] = deque()
        self._children = [_Child(i, self._ctx, threads, self._forward) for i in range(count)]
        self._closing = False
        self._backoff = RESTART_SECONDS
        self._ready = threading.Event()  # every child has been ready once
        self._watcher = threading.Thread(target=self._watch, name="resumers", daemon=True)
        self._watcher.start()

    def wait_ready(self, timeout: float = START_SECONDS) -> bool:
        """Until every child has imported, opened its pool and built the graphs (start-up), so
        the first decisions do not wait for that; False if ``timeout`` passed first (the app
        serves anyway, and hand-offs queue until a child is ready)."""
        return self._ready.wait(timeout)

    def submit(self, claimed: Run) -> None:
        """Queue ``claimed`` for a child, under the caller's request id; never blocks."""
        with self._lock:
            self._queue.append((claimed, request_id.get()))
            self._dispatch()

    def _dispatch(self) -> None:
        """Send queued runs to children with a free thread (under the lock)."""
        while self._queue:
            ready = [c for c in self._children if c.free > 0 and not (c.stopping or c.gone)]
            if not ready:
                return
            child = max(ready, key=lambda c: c.free)
            claimed, rid = self._queue.popleft()
            try:
                child.conn.send(("resume", claimed, rid))
            except OSError:  # it just died: the watcher replaces it; the run waits
                self._queue.appendleft((claimed, rid))
                child.free = 0
                return
            child.free -= 1
            child.taken[claimed.thread_id] = claimed

    def _watch(self) -> None:
        """Read the children's messages, notice deaths, start replacements, stop on close."""
        from multiprocessing.connection import wait

        from ops import metrics

        while True:
            with self._lock:
                if self._closing and not self._queue:
                    for child in self._children:
                        if not child.stopping and not child.gone:
                            self._stop(child)
                if self._closing and all(c.gone for c in self._children):
                    return
                handles: dict[Any, _Child] = {}
                for child in self._children:
                    if not child.gone:
                        handles[child.conn] = child
                        handles[child.process.sentinel] = child
            for handle in wait(list(handles), timeout=0.5):
                child = handles[handle]
                if isinstance(handle, int):  # the process sentinel: it exited
                    if not child.conn.poll():  # its last messages are read first
                        child.gone = True
                    continue
                try:
                    message = child.conn.recv()
                except (EOFError, OSError):
                    child.gone = True
                    continue
                if message[0] == "metric":
                    metrics.replay(message[1], message[2])
                    continue
                with self._lock:
                    if message[0] == "done":
                        child.taken.pop(message[1], None)
                        child.free += 1
                    elif message[0] == "ready":
                        child.free = self._threads
                        child.ready = True
                        self._backoff = RESTART_SECONDS
                        if all(c.ready for c in self._children):
                            self._ready.set()
                        log.info("resumer process %s ready", message[1])
                    self._dispatch()
            self._replace_gone()

    def _replace_gone(self) -> None:
        due = []
        with self._lock:
            for child in self._children:
                if not child.gone or child.replaced:
                    continue
                child.free = 0
                if child.taken:
                    log.warning(
                        "resumer process %s exited (code %s) while resuming %s: the sweep "
                        "takes them over (at once if it handed them back, else after the lease)",
                        child.process.pid,
                        child.process.exitcode,
                        ", ".join(sorted(child.taken)),
                    )
                    child.taken.clear()
                pause = RESTART_SECONDS if child.ready else self._backoff
                if not self._closing and time.monotonic() - child.started >= pause:
                    child.replaced = True
                    due.append(child)
                    if not child.ready:
                        self._backoff = min(60.0, self._backoff * 2)
        for child in due:  # starting a process takes a while: not under the lock
            log.warning("resumer process %s exited; starting another", child.process.pid)
            child.process.join(1)
            child.conn.close()
            fresh = _Child(child.slot, self._ctx, self._threads, self._forward)
            with self._lock:
                self._children[child.slot] = fresh
                self._dispatch()

    def _stop(self, child: _Child) -> None:
        """Tell ``child`` to stop within the time the stop has left (under the lock)."""
        child.stopping = True
        try:
            child.conn.send(("stop", stop_budget()))
        except OSError:
            pass

    def close(self, release: Callable[[str, str], bool] | None = None) -> None:
        """Finish the queued and the running resumes within the stop's time (``core.shutdown``),
        then stop the children, which hand back what they could not finish; runs still queued
        are handed back here with ``release`` (``store.leases.release``)."""
        with self._lock:
            self._closing = True
        self._watcher.join(stop_budget())
        with self._lock:
            queued = [claimed for claimed, _ in self._queue]
            self._queue.clear()
            for child in self._children:  # the queue never drained: stop them now
                if not (child.stopping or child.gone):
                    self._stop(child)
        handed = [c.thread_id for c in queued if release and release(c.thread_id, c.owner or "")]
        if handed:
            log.warning("never resumed here, handed back: %s", ", ".join(handed))
        self._watcher.join(HAND_BACK_SECONDS)
        for child in self._children:
            child.process.join(HAND_BACK_SECONDS)  # one that said its last word may be exiting
            if child.process.is_alive():
                log.warning(
                    "resumer process %s still there after the stop, terminated; left to the "
                    "lease: %s",
                    child.process.pid,
                    ", ".join(sorted(child.taken)) or "nothing",
                )
                child.process.terminate()
            child.process.join(5)
            child.conn.close()


def stop_budget() -> float:
    """The time the stop has left: from SIGTERM (``core.shutdown``), else ``SHUTDOWN_SECONDS``
    (a stop without one: Ctrl-C, a test)."""
    if shutdown.requested():
        return shutdown.remaining()
    return settings.SHUTDOWN_SECONDS.get()


def serve(conn: Connection, threads: int, forward: bool) -> None:
    """A resumer process: resume each run the app sends on ``threads`` threads, say when each is
    done, and stop when told (or when the app is gone), after finishing what it took."""
    # Ctrl-C and SIGTERM (systemd signals the whole group) are the app's to handle: it tells us
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from core.logs import configure_logging

    configure_logging("INFO")  # the app's format, level and stream (stderr is inherited)
    send_lock = threading.Lock()

    def send(message: tuple) -> None:
        try:
            with send_lock:
                conn.send(message)
        except OSError:
            pass  # the app is gone: the lease covers what it no longer hears about

    count_for_app(send if forward else None)
    try:
        _serve(conn, threads, send)
    except Exception:  # noqa: BLE001 - one line, not multiprocessing's traceback; the app restarts us
        log.error("resumer process %s stopped", os.getpid(), exc_info=True)
        sys.exit(1)


def count_for_app(send: Any) -> None:
    """Set up this resumer's counters before it takes any run: forwarded to the app through
    ``send``, or (``PROMETHEUS_MULTIPROC_DIR``) registered here once, now, so no two resume
    threads race to register them on first use."""
    from ops import metrics

    if send is not None:
        metrics.forward_to(lambda name, args: send(("metric", name, args)))
    metrics.prepare()


def _serve(conn: Connection, threads: int, send: Any) -> None:
    from worker.runner import open_runner
    from worker.stopping import hand_back_when_due

    with open_runner() as runner, ThreadPoolExecutor(threads, "resume") as pool:
        taken = _Taken(runner)
        _build_graphs(runner)
        send(("ready", os.getpid()))
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = ("stop", None)  # the app is gone: finish what was taken, then exit
            if message[0] == "stop":
                shutdown.begin(message[1])
                hand_back_when_due(taken)
                break
            _, claimed, rid = message
            taken.runs[claimed.thread_id] = claimed
            pool.submit(_resume, runner, claimed, rid, taken.reporting(send))


class _Taken:
    """The runs a resumer process took (under its app's owners, so the owner does not say they
    are this process's): what a stop hands back besides the leases it holds."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.runs: dict[str, Run] = {}

    def reporting(self, send: Any) -> Any:
        """``send``, which also forgets a run once it is reported done."""

        def report(message: tuple) -> None:
            self.runs.pop(message[1], None)
            send(message)

        return report

    def hand_back(self) -> list[str]:
        from store.leases import release

        db = self.runner.store.db
        held = self.runner.hand_back()
        left = [r for r in list(self.runs.values()) if release(db, r.thread_id, r.owner or "")]
        return sorted({*held, *(r.thread_id for r in left)})


def _build_graphs(runner: Any) -> None:
    """Build the graphs of the workflows the app may resume now, not in the first resume (the
    app builds them when a decision is checked; this process never checks one)."""
    from worker.workflows import http_names

    for name in http_names():
        try:
            runner.graph(name)
        except Exception as exc:  # noqa: BLE001 - its first resume reports it
            log.warning("resumer could not build workflow %s yet: %s", name, one_line(exc))


def _resume(runner: Any, claimed: Run, rid: str | None, send: Any) -> None:
    request_id.set(rid)  # the resume logs under the request's id, as in the app
    thread_id.set(claimed.thread_id)
    try:
        runner.resume_claimed(claimed)
    except Exception as exc:  # noqa: BLE001 - the lease and the sweep take it over
        log.warning("resume of %s stopped: %s", claimed.thread_id, one_line(exc))
    finally:
        send(("done", claimed.thread_id))
