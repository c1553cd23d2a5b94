"""Running the app as functions (AWS Lambda): the HTTP handler, the scheduled sweep, and how a
decision is answered when nothing may run after the response.

A platform that freezes a function once it has answered never runs a background task started
after the 202. So in serverless mode (``SERVERLESS``, on by default inside Lambda) a claimed
decision is resumed inline, in a worker thread, for at most ``RESUME_BUDGET_SECONDS`` (below
Svix's 15 s timeout): a run that is done or paused again by then is answered with its outcome;
a longer one is answered 202 and keeps its lease, so if the platform freezes the thread, the
lease runs out and the next scheduled pass (:func:`scheduled`) finishes it.

Nothing here imports LangGraph: a refused or ignored delivery must not pay for it.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import socket
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from fastapi import BackgroundTasks
from fastapi.responses import JSONResponse

from api.resumers import Resumers, processes, stop_budget
from core import coldstart, settings, tracing
from core.errors import one_line
from core.faults import fault
from store.states import Run
from worker.outcome import Outcome
from worker.resumer import Resumer
from worker.runner import Runner, open_runner

log = logging.getLogger(__name__)


def outcome_body(outcome: Outcome) -> dict[str, Any]:
    """What a caller learns about a resume that finished within the budget."""
    body: dict[str, Any] = {"status": str(outcome.status), "thread_id": outcome.thread_id}
    if outcome.interrupt_id and outcome.status == "waiting":
        body["interrupt_id"] = outcome.interrupt_id
    if outcome.result is not None:
        body["result"] = outcome.result
    if outcome.error is not None:
        body["error"] = outcome.error
    if outcome.note is not None:
        body["note"] = str(outcome.note)
    return body


def resume_within_budget(
    runner: Runner, claimed: Run, budget: float | None = None
) -> Outcome | None:
    """Resume the claimed run in a worker thread and wait up to ``budget`` seconds: its outcome,
    or None when it is still running (it carries on under its lease)."""
    thread_id = claimed.thread_id
    budget = settings.RESUME_BUDGET_SECONDS.get() if budget is None else budget
    finished: list[Outcome] = []

    def work() -> None:
        try:
            finished.append(runner.resume_claimed(claimed))
        except Exception as exc:  # noqa: BLE001 - the lease and the sweep take it over
            log.warning("inline resume of %s stopped: %s", thread_id, one_line(exc))

    worker = threading.Thread(target=work, name=f"resume-{thread_id}", daemon=True)
    worker.start()
    worker.join(budget)
    return finished[0] if finished else None


_resumers_lock = threading.Lock()
_processes: Resumers | None = None
_threads: Resumer | None = None


def open_resumers(runner: Runner) -> None:
    """Start this app process's resumer (``worker.resumer``): in resumer processes
    (``RESUME_PROCESSES``), started now so each uvicorn worker has its own, and waited for (a
    few seconds, at most ``api.resumers.START_SECONDS``) so the app answers its first decision
    only when a resume can follow it; without any (SQLite, by default), on ``RESUME_THREADS``
    threads of this process, apart from the ones answering requests. Serverless: none."""
    global _processes, _threads
    if settings.serverless():
        return
    with _resumers_lock:
        count = processes()
        if count and _processes is None:
            requeue = functools.partial(
                runner.store.tables.leases().release_of, socket.gethostname()
            )
            _processes = Resumers(count, settings.RESUME_THREADS.get(), requeue)
            if not _processes.wait_ready():
                log.warning("resumer processes not ready yet; claims stay queued until they are")
        elif not count and _threads is None:
            _threads = Resumer(runner, settings.RESUME_THREADS.get()).start()


def close_resumers(runner: Runner | None = None) -> None:
    """Finish the resumes taken (the app is stopping) within the stop's time
    (``core.shutdown``), before the store closes. Unfinished ones are then handed back (queued
    again, so another resumer takes them at once): by the resumer processes themselves, or here
    by releasing this process's leases and exiting, rather than keep the platform's grace
    period waiting for them."""
    global _processes, _threads
    with _resumers_lock:
        children, _processes = _processes, None
        threads, _threads = _threads, None
    if children is not None:
        children.close()
    if threads is None:
        return
    running = threads.close(stop_budget())
    if not running or runner is None:
        return
    handed = runner.hand_back()
    if handed:
        log.warning("stopping: %s handed back to another process", ", ".join(sorted(handed)))
    for handler in logging.getLogger().handlers:  # a resume thread would keep the process
        handler.flush()
    os._exit(0)


def after_answer(background: BackgroundTasks, runner: Runner, claimed: Run) -> None:
    """What follows an applied decision's answer. The app's runner handed the claimed run to
    its resumer when the decision claimed it (``Runner.decide``): nothing. Serverless (no
    resumer): a background task, which the host runs before the function is frozen (a thread
    of ours would be frozen with it)."""
    if runner.resumer is None:
        background.add_task(runner.resume_claimed, claimed)


def answer_claimed(
    runner: Runner,
    claimed: Run,
    background: BackgroundTasks,
    accepted: dict[str, Any],
) -> JSONResponse:
    """The answer to a claimed decision. Serverless: resume inline and answer 200 with the
    outcome, or 202 past the budget (blocks: call it in a worker thread). Otherwise: 202 now,
    the run already handed off (does not block: fine on the event loop). An answer that fails
    to render is the committed one: ``accepted``."""
    if runner.resumer is not None:
        render = functools.partial(JSONResponse, accepted, status_code=202)
        return committed_answer("decide.answer", render, accepted, 202)
    outcome = resume_within_budget(runner, claimed)
    if outcome is None:
        budget = settings.RESUME_BUDGET_SECONDS.get()
        return JSONResponse({**accepted, "resuming_past_seconds": budget}, status_code=202)
    return JSONResponse(outcome_body(outcome), status_code=200)


def committed_answer(
    point: str, render: Callable[[], JSONResponse], committed: dict[str, Any], status: int
) -> JSONResponse:
    """``render()``, the full answer to a request whose work is committed; if it fails, the
    committed result itself (``committed``, ``status``), never a 500 that would tell the caller
    nothing was done (``point``: the fault point there, ``core.faults.AFTER_COMMIT``)."""
    try:
        fault(point)
        return render()
    except Exception as exc:  # noqa: BLE001 - the commit stands: say what it was
        log.warning("answer not rendered after the commit (%s): %s", point, one_line(exc))
        return JSONResponse(committed, status_code=status)


def attach_resumer(runner: Runner) -> None:
    """The app's runner wakes this process's resumer the moment a decision claims a run (its
    resumer threads; resumer processes hear the claim's ``NOTIFY``, or poll on SQLite);
    serverless: none, the source takes and resumes the run inline within its budget."""
    if settings.serverless():
        return
    threads = _threads
    runner.resumer = threads.ring if threads is not None else _nothing


def _nothing(claimed: Run) -> None:
    """The wake-up of an app whose resumers are processes: the claim's commit woke them."""


_http: Any = None
_http_lock = threading.Lock()


def http_handler(event: dict, context: Any) -> dict:
    """The Lambda entry for the HTTP app (API Gateway HTTP API v2 and Function URL events).
    The app (and its database pool) is made on the first event and kept while the container
    lives, so warm invocations pay for neither. A database down at the cold start is a 503 (the
    caller retries; Svix does), not an error of the function, and the next event tries again."""
    global _http
    if _http is None:
        with _http_lock:
            if _http is None:
                from mangum import Mangum

                from api.app import create_app, start

                app = create_app(lazy=True)  # a delivery builds no other route
                try:
                    # lifespan "off": Mangum would run it around every event, closing the pool
                    atexit.register(start(app))
                except Exception as exc:
                    if not _unreachable(exc):
                        raise
                    log.error("%s %s 503: %s", *_request_line(event), one_line(exc))
                    return _unavailable()
                _http = Mangum(app, lifespan="off")
                # ops.http writes each request's one line; Mangum's own would be a second
                logging.getLogger("mangum.http").setLevel(logging.WARNING)
    try:
        return _http(event, context)
    finally:
        tracing.flush()  # the function is frozen once it has answered
        coldstart.over()  # a warm container collects garbage as any process


def _unreachable(exc: BaseException) -> bool:
    from api.ops import is_outage
    from core.errors import Unreachable

    return isinstance(exc, Unreachable) or is_outage(exc)


def _request_line(event: Any) -> tuple[str, str]:
    http = (event.get("requestContext") or {}).get("http") or {} if isinstance(event, dict) else {}
    return str(http.get("method", "?")), str(http.get("path", "?"))[:200]


def _unavailable() -> dict[str, Any]:
    """API Gateway's (and a Function URL's) shape of the app's 503."""
    from api.errors import error_body

    body = error_body("unavailable", "the database is unavailable; retry later")
    headers = {"content-type": "application/json", "retry-after": "5"}
    return {
        "statusCode": 503,
        "headers": headers,
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """A scheduled pass as JSON: how many runs ended how, and which."""
    threads: dict[str, list[str]] = defaultdict(list)
    for outcome in outcomes:
        threads[str(outcome.note or outcome.status)].append(outcome.thread_id)
    return {
        "handled": len(outcomes),
        "counts": {kind: len(ids) for kind, ids in threads.items()},
        "threads": dict(threads),
        "failed": sum(1 for o in outcomes if o.failed),
    }


def scheduled_handler(event: dict, context: Any) -> dict:
    """The Lambda entry for an EventBridge schedule: one recovery pass, as ``recover.py`` does
    once, on a store opened and closed within the invocation (no connection outlives it)."""
    try:
        if isinstance(event, dict) and "create_key" in event:
            return create_key(event["create_key"])
        detail = event.get("detail") if isinstance(event, dict) else None
        retry_failed = bool(isinstance(detail, dict) and detail.get("retry_failed"))
        with open_runner() as runner:
            outcomes = runner.recovery_pass(retry_failed=retry_failed)
    finally:
        coldstart.over()
    tracing.flush()
    return summary(outcomes)


def create_key(spec: Any) -> dict[str, Any]:
    """A one-off invoke of the sweep function, ``{"create_key": {"name": ..., "roles": [...]}}``:
    an API key (the first admin's) without a shell on the database. Only who may invoke the
    function (IAM) can; the key is in the invoke's answer, never in a log."""
    from core.errors import UserError
    from store.db import open_store
    from store.keys import parse_roles

    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        return {"error": 'create_key needs {"name": "...", "roles": ["admin"]}'}
    roles = spec.get("roles")
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        return {"error": 'create_key needs "roles", a list such as ["admin"]'}
    try:
        with open_store() as store:
            key, token = store.tables.keys().create(spec["name"], parse_roles(roles))
    except UserError as exc:
        return {"error": str(exc)}
    log.info("created API key %s for %s", key.id, key.name)
    return {"id": key.id, "name": key.name, "roles": sorted(key.roles), "key": token}
