"""What ``run.py`` and ``recover.py`` do once their arguments are parsed: call the worker, print
one line per outcome, and say which exit code fits (0 done or paused, 1 a run failed; a
``UserError`` becomes exit 2 in :func:`core.cli.cli_main`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from core import shutdown
from core.errors import UserError, one_line
from core.hitl import HitlRequest
from core.logs import result, say
from inbox.outbox import Delivery
from worker.decisions import Applied, Decision, Pending, Result, Source
from worker.outcome import Outcome
from worker.refusals import Refused
from worker.runner import Runner, open_runner, run_thread
from worker.stopping import close_resumer, hand_back_when_due

OK, RUN_FAILED = 0, 1


log = logging.getLogger(__name__)


def _status(outcomes: list[Outcome]) -> int:
    return RUN_FAILED if any(o.failed for o in outcomes) else OK


def start(
    thread_id: str | None,
    text: str,
    *,
    workflow: str,
    expires_in: str | None,
    requested_by: str | None,
) -> int:
    """``run.py``: one segment of a new run. stdout gets exactly one line (the pause or the
    answer); the thread id (``thread_id``, or the new one drawn when None) and the model go to
    stderr, before the segment runs."""

    def announce(thread_id: str, model: str) -> None:
        result(f"thread: {thread_id}  model: {model}", thread=thread_id, err=True)

    outcome = run_thread(
        thread_id,
        text,
        workflow=workflow,
        on_start=announce,
        expires_in=expires_in,
        requested_by=requested_by,
    )
    result(outcome.line(), thread=outcome.thread_id)
    return _status([outcome])


def waiting_lines(runner: Runner, now: float) -> list[str]:
    """``recover.py --list``: each waiting run, its age, and how far it was reminded or
    escalated (by the sweep's ladder, or by the inbox's own escalations)."""
    lines = []
    for row in runner.runs.waiting_with_escalations():
        age = int(now - row.updated_at)
        line = f"{row.thread_id}  waiting on {row.interrupt_id}  ({age}s)"
        if row.ladder_step:
            line += "  escalated (ladder)" if row.ladder_step >= 2 else "  reminded"
        if row.escalated_at is not None:  # escalated at least once
            times = f" x{row.escalations}" if row.escalations > 1 else ""
            line += f"  escalated{times} ({int(now - row.escalated_at)}s ago)"
        lines.append(line)
    return lines or ["no waiting runs"]


def _print(outcomes: list[Outcome]) -> None:
    for outcome in outcomes:
        result(f"{outcome.thread_id}  {outcome.line()}", thread=outcome.thread_id)


def recover(
    *,
    list_only: bool = False,
    history: str | None = None,
    cancel: str | None = None,
    reason: str | None = None,
    retry: str | None = None,
    retry_failed: bool = False,
    wait: bool = False,
    forever: bool = False,
    interval: float = 5.0,
    prune: bool = False,
    verify_audit: bool = False,
) -> int:
    """``recover.py``: one command (list, history, cancel, retry) or the sweep: once, until
    nothing is runnable (``wait``: no run running or resuming; runs waiting on a pending
    approval do not count), or until stopped (``forever``, a service), riding out database
    outages while it keeps sweeping."""
    from store.history import history_lines

    with open_runner() as runner:
        if list_only:
            say("\n".join(waiting_lines(runner, time.time())))
            return OK
        if history:
            events = runner.store.tables.reads().history(history)
            if not events:
                raise UserError(f"no run {history!r}; check the thread id")
            say("\n".join(history_lines(events)))
            return OK
        if cancel:
            say(f"{cancel}  {runner.cancel(cancel, reason)}")
            return OK
        if verify_audit:
            from worker.audit import verify_report

            ok, line = verify_report(runner.store.tables.audit())
            say(line)
            return OK if ok else RUN_FAILED
        if prune:
            from ops.retention import prune_all

            result(prune_all(runner.store).line())
            return OK
        if retry:
            outcome = runner.retry(retry)
            _print([outcome])
            return _status([outcome])
        code = OK
        shutdown.on_sigterm()  # SIGTERM: finish (or hand back) the current run, take no other
        hand_back_when_due(runner)
        resumer = None
        if forever:  # a service: also the one resumer (``worker.resumer``), between sweeps too
            from core import settings
            from worker.resumer import Resumer

            resumer = Resumer(runner, settings.RESUME_THREADS.get(), "recover").start()
            runner.resumer = resumer.ring
        while not shutdown.requested():
            try:
                outcomes = runner.recovery_pass(retry_failed=retry_failed)
                _print(outcomes)
                code = max(code, _status(outcomes))
                if not forever and (not wait or not runner.runs.runnable()):
                    return code
            except UserError:
                raise  # a setting to fix (bad key, bad URL): one line, exit 2
            except Exception as exc:  # noqa: BLE001 - database down: say so, keep sweeping
                if not (wait or forever):
                    result(f"error: sweep failed: {one_line(exc)}", level="error", err=True)
                    return RUN_FAILED
                log.warning("sweep failed (%s); retrying", one_line(exc))  # a log line
            _heartbeat()
            shutdown.wait(interval)  # a SIGTERM ends the wait at once
        if resumer is not None:
            close_resumer(resumer, code, last="stopped (SIGTERM)")
        log.info("stopped (SIGTERM)")
        return code


def _heartbeat() -> None:
    """Touch ``HEARTBEAT_FILE`` after a pass, failed or not: a liveness probe restarts a sweeper
    whose loop stopped turning, not one riding out a database outage."""
    from pathlib import Path

    from core import settings

    path = settings.HEARTBEAT_FILE.get()
    if path:
        try:
            Path(path).touch()
        except OSError as exc:
            log.warning("heartbeat %s not written: %s", path, one_line(exc))


def answer_request(
    runner: Runner,
    request_id: str,
    decide: Callable[[HitlRequest], list[dict[str, Any] | None]],
    by: str,
) -> Result:
    """The inbox command line as a source of decisions: the reviewer ``by`` decides the local
    inbox's request ``request_id`` (``decide`` turns its request into their decisions). An
    applied decision's run is queued for a resumer (``store.claimed``); see :func:`answer`."""
    from inbox import thread_id_from

    approval = runner.inbox.get(request_id) if runner.inbox.name == "local" else None
    thread_id = thread_id_from(approval.external_id) if approval else None
    if approval is None or thread_id is None:
        raise UserError(
            f"no approval request with id {request_id[:200]!r}; "
            "`approval-worker inbox list` shows the pending ones"
        )
    decision = Decision.read(
        decide(approval.request),
        thread_id=thread_id,
        interrupt_id=approval.id,
        approvers=[by],
        source=Source.CLI,
        digest=approval.digest,  # the request as the local inbox holds it, as shown to them
    )
    return runner.decide(decision)


def answer(
    request_id: str,
    decide: Callable[[HitlRequest], list[dict[str, Any] | None]],
    by: str,
    command: str,
) -> None:
    """``python -m inbox approve|reject|edit|decide``. An applied decision's run is queued in
    the database for a resumer (a running app's, ``recover --forever``'s, woken at once on
    Postgres), and delivered to the app as a signed ``interrupt.answered`` with ``WEBHOOK_URL``.
    This command never runs the graph: a short-lived process that resumed would hold the run's
    side effects hostage to a terminal; with no resumer running, the next sweep (``recover``,
    from cron) takes the queued run. A refusal is a ``UserError`` (exit 2)."""
    from inbox.events import answered_event
    from inbox.outbox import Outbox, enqueue, signer, webhook_url

    with open_runner() as runner:
        url = webhook_url()
        if url:
            signer()  # refuse before deciding if the delivery could never be signed
        result = answer_request(runner, request_id, decide, by)
        if isinstance(result, Refused):
            raise result
        say(f"{command} recorded for {request_id} by {by}")
        if isinstance(result, Pending) and result.questions:
            say(
                f"  {result.answered} of {result.questions} actions answered; the run resumes "
                "when every one is"
            )
            return
        if isinstance(result, Pending):
            say(
                f"  {len(result.approvers)} of {result.quorum} distinct approvals "
                f"({', '.join(result.approvers)}); it stays pending until the quorum is met"
            )
            return
        assert isinstance(result, Applied)
        if url:
            approval = runner.inbox.get(request_id)
            assert approval is not None  # it was just decided
            approval.approvers = result.approvers
            outbox = Outbox(runner.store.tables, senders=runner.senders)
            outbox.rows.together(lambda tx: enqueue(tx, url, answered_event(approval)))
            for d in outbox.deliver_due():
                say(delivery_line(d))
        say(f"  {QUEUED}")


QUEUED = (
    "queued for a resumer: a running app or `recover --forever` takes it now, "
    "else the next `recover` sweep"
)


def delivery_line(d: Delivery) -> str:
    if d.ok:
        return f"delivered {d.message_id} to {d.url}"
    return f"delivery {d.message_id} to {d.url} failed ({d.detail}); it will be retried"
