"""Resumer processes: the resumes of an app process run in child processes of its own
(``RESUME_PROCESSES``), so an acknowledgement never shares an interpreter (its GIL) with a
graph segment.

Each child opens its own store and ``Runner`` from the same settings and runs the one resumer
(``worker.resumer``) on ``RESUME_THREADS`` threads: it takes queued claims from the database
itself (``FOR UPDATE SKIP LOCKED``), woken by ``NOTIFY`` from the claim's transaction, so the
app sends a child no work and keeps no queue. Notifications the done transition owes are sent by
the child's own outbox sender; counters it keeps go back to the app (``ops.metrics.forward_to``)
unless ``PROMETHEUS_MULTIPROC_DIR`` sums every process's.

A child that dies loses nothing: runs queued and not taken stay queued for the others (or its
replacement), and the runs it had taken are queued again by the watcher thread as soon as it
sees the process gone (their owner names its pid), not when their lease runs out. Children are
started with *spawn* (never a fork of a threaded process). Stopping: each child is told to stop
with the time the app has left (``core.shutdown``: ``SHUTDOWN_SECONDS`` from SIGTERM), takes no
more runs, finishes what it took in that time or hands it back (queued again, so another
resumer takes it at once) and exits; a child still there after :data:`HAND_BACK_SECONDS` more is
terminated. The app writes to a child's pipe only to stop it, and never under its lock.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core import settings, shutdown
from core.errors import one_line

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
    """One resumer process as the app sees it: its pipe and how far it got."""

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
        self.stopping = False  # told to stop
        self.gone = False  # exited (its pipe read to the end)
        self.replaced = False
        self.ready = False  # said it serves


class Resumers:
    """The app side: the children, and the watcher thread that reads their pipes, notices
    deaths, queues a dead child's runs again (``requeue``: its pid -> the runs released) and
    starts replacements."""

    def __init__(
        self, count: int, threads: int, requeue: Callable[[int], list[str]] | None = None
    ) -> None:
        import multiprocessing  # here: the serverless path never loads it

        from ops import metrics

        self._ctx = multiprocessing.get_context("spawn")
        self._threads = threads
        self._requeue = requeue
        # counters go back to the app when it keeps them alone (no multiprocess directory)
        self._forward = metrics.enabled() and not settings.PROMETHEUS_MULTIPROC_DIR.get()
        self._lock = threading.Lock()
        self._children = [_Child(i, self._ctx, threads, self._forward) for i in range(count)]
        self._closing = False
        self._backoff = RESTART_SECONDS
        self._ready = threading.Event()  # every child has been ready once
        self._watcher = threading.Thread(target=self._watch, name="resumers", daemon=True)
        self._watcher.start()

    def wait_ready(self, timeout: float = START_SECONDS) -> bool:
        """Until every child has imported, opened its pool and built the graphs (start-up), so
        the first decisions do not wait for that; False if ``timeout`` passed first (the app
        serves anyway: claims stay queued until a child takes them)."""
        return self._ready.wait(timeout)

    def pids(self) -> list[int]:
        with self._lock:
            return [c.process.pid for c in self._children if not c.gone and c.process.pid]

    def _watch(self) -> None:
        """Read the children's messages, notice deaths, start replacements, stop on close."""
        from multiprocessing.connection import wait

        from ops import metrics

        while True:
            with self._lock:
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
                elif message[0] == "ready":
                    with self._lock:
                        child.ready = True
                        self._backoff = RESTART_SECONDS
                        if all(c.ready for c in self._children):
                            self._ready.set()
                    log.info("resumer process %s ready", message[1])
            self._replace_gone()

    def _replace_gone(self) -> None:
        due = []
        with self._lock:
            for child in self._children:
                if not child.gone or child.replaced:
                    continue
                pause = RESTART_SECONDS if child.ready else self._backoff
                if self._closing or time.monotonic() - child.started >= pause:
                    child.replaced = True
                    due.append(child)
                    if not child.ready:
                        self._backoff = min(60.0, self._backoff * 2)
        for child in due:  # the database and a process start take a while: not under the lock
            child.process.join(1)
            self._queue_again(child)
            child.conn.close()
            if self._closing:
                continue
            log.warning("resumer process %s exited; starting another", child.process.pid)
            fresh = _Child(child.slot, self._ctx, self._threads, self._forward)
            with self._lock:
                self._children[child.slot] = fresh

    def _queue_again(self, child: _Child) -> None:
        """The runs a gone child had taken, queued again for the others at once."""
        if self._requeue is None or child.process.pid is None:
            return
        try:
            again = self._requeue(child.process.pid)
        except Exception as exc:  # noqa: BLE001 - their lease runs out, and the sweep takes them
            log.warning("runs of resumer process %s not queued again: %s", child.process.pid,
                        one_line(exc))  # fmt: skip
            return
        if again:
            log.warning(
                "resumer process %s exited (code %s) while resuming %s: queued again",
                child.process.pid,
                child.process.exitcode,
                ", ".join(again),
            )

    def close(self) -> None:
        """Tell every child to stop within the stop's time (``core.shutdown``); each finishes
        what it took or hands it back; one still there after that is terminated."""
        with self._lock:
            self._closing = True
            children = [c for c in self._children if not (c.stopping or c.gone)]
            for child in children:
                child.stopping = True
        budget = stop_budget()
        for child in children:  # outside the lock: a full pipe must block nobody else
            try:
                child.conn.send(("stop", budget))
            except OSError:
                pass
        for child in list(self._children):
            child.process.join(budget + HAND_BACK_SECONDS)
            if child.process.is_alive():
                log.warning(
                    "resumer process %s still there after the stop, terminated; its runs are "
                    "queued again", child.process.pid)  # fmt: skip
                child.process.terminate()
                child.process.join(5)
        self._watcher.join(HAND_BACK_SECONDS)
        for child in list(self._children):
            if not child.replaced:
                self._queue_again(child)
            child.conn.close()


def stop_budget() -> float:
    """The time the stop has left: from SIGTERM (``core.shutdown``), else ``SHUTDOWN_SECONDS``
    (a stop without one: Ctrl-C, a test)."""
    if shutdown.requested():
        return shutdown.remaining()
    return settings.SHUTDOWN_SECONDS.get()


def serve(conn: Connection, threads: int, forward: bool) -> None:
    """A resumer process: take queued runs and resume them on ``threads`` threads until told to
    stop (or the app is gone), then finish what it took or hand it back."""
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
    from worker.resumer import Resumer
    from worker.runner import open_runner
    from worker.stopping import close_resumer, hand_back_when_due

    with open_runner() as runner:
        _build_graphs(runner)
        resumer = Resumer(runner, threads).start()
        send(("ready", os.getpid()))
        try:
            message = conn.recv()
        except (EOFError, OSError):
            message = ("stop", None)  # the app is gone: finish what was taken, then exit
        shutdown.begin(message[1])  # takes no more runs from here
        hand_back_when_due(resumer)  # what is still going at the deadline: handed back, exit
        close_resumer(resumer, 0)


def _build_graphs(runner: Any) -> None:
    """Build the graphs of the workflows the app may resume now, not in the first resume (the
    app builds them when a decision is checked; this process never checks one)."""
    from worker.workflows import http_names

    for name in http_names():
        try:
            runner.graph(name)
        except Exception as exc:  # noqa: BLE001 - its first resume reports it
            log.warning("resumer could not build workflow %s yet: %s", name, one_line(exc))
