"""The commands' argument parsers, shared by ``approval-worker`` and the thin entry scripts
(``run.py``, ``recover.py``). Each is wrapped by ``cli_main``: settings are checked first, and
the exit code is 0 done or paused, 1 a run failed or the database could not be reached, 2 bad
input or settings."""

from __future__ import annotations

import argparse
import getpass

from core.cli import cli_main
from core.errors import UserError
from core.logs import say

RUN_DOC = """Start a run: one graph segment, then exit (it pauses for approval or finishes).

stdout gets exactly one line (the pause or the final answer), so scripts can read it; the
``thread: ...  model: ...`` line goes to stderr. Exit 0 when the run paused or finished, 1 when
it failed or the database could not be reached, 2 for bad input or settings (before anything is
written)."""

RECOVER_DOC = """Recovery sweep (cron, a systemd timer, or a service with --forever): resume
answered runs, take over runs of dead processes, expire overdue approvals, retry failed runs (with
--retry-failed), prune finished runs past retention; or list what waits, cancel a run, print its
history, prune now (--prune), check the audit trail (--verify-audit).

Exit 0 when every run handled is done or paused, 1 when one failed or the database could not be
reached, 2 for bad input or settings."""


@cli_main
def run(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=RUN_DOC)
    parser.add_argument("request", help='what the agent should do, e.g. "Refund order A-1001: ..."')
    parser.add_argument(
        "--thread-id",
        help="choose the thread id (default: a new one, thread_ and a UUID4's 32 hex digits)",
    )
    parser.add_argument(
        "--workflow",
        default="refund",
        help="refund (default), purchase-order, or a graph factory as package.module:function",
    )
    parser.add_argument(
        "--expires-in",
        help="how long reviewers have, e.g. 2h or 30m (default: the workflow's policy)",
    )
    parser.add_argument(
        "--requested-by",
        help="who asks for this (default: your user name); with SEPARATION_OF_DUTIES=1 they "
        "may not approve it",
    )
    args = parser.parse_args(argv)

    from worker.cli import start

    return start(
        args.thread_id,
        args.request,
        workflow=args.workflow,
        expires_in=args.expires_in,
        requested_by=args.requested_by or getpass.getuser(),
    )


@cli_main
def recover(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=RECOVER_DOC)
    parser.add_argument("--list", action="store_true", help="print the waiting runs and exit")
    parser.add_argument(
        "--wait",
        action="store_true",
        help="sweep until nothing is runnable (no run running or resuming); runs waiting on a "
        "pending approval do not keep it going",
    )
    parser.add_argument(
        "--forever",
        action="store_true",
        help="sweep every --interval seconds until stopped (run as a service)",
    )
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between sweeps")
    parser.add_argument("--retry", metavar="THREAD_ID", help="retry one failed run now")
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="also retry failed runs (bounded attempts, with backoff)",
    )
    parser.add_argument("--history", metavar="THREAD_ID", help="print one run's audit trail")
    parser.add_argument("--cancel", metavar="THREAD_ID", help="cancel one run")
    parser.add_argument("--reason", help="why (with --cancel), kept on the run")
    parser.add_argument(
        "--prune",
        action="store_true",
        help="delete what retention allows (RETAIN_CHECKPOINTS_FOR, RETAIN_RUNS_FOR) and exit",
    )
    parser.add_argument(
        "--verify-audit",
        action="store_true",
        help="check the audit trail and its signed anchors (as `approval-worker audit verify`); "
        "exit 1 at the first broken link",
    )
    args = parser.parse_args(argv)
    if args.reason and not args.cancel:
        raise UserError("--reason goes with --cancel THREAD_ID")
    if args.forever and args.wait:
        raise UserError("choose one of --wait (until nothing is runnable) and --forever")
    if not 0 < args.interval <= 86400:
        raise UserError("--interval must be between 0 and 86400 seconds")

    from worker.cli import recover as sweep

    return sweep(
        list_only=args.list,
        history=args.history,
        cancel=args.cancel,
        reason=args.reason,
        retry=args.retry,
        retry_failed=args.retry_failed,
        wait=args.wait,
        forever=args.forever,
        interval=args.interval,
        prune=args.prune,
        verify_audit=args.verify_audit,
    )


@cli_main
def serve(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The HTTP app under uvicorn, logging through the app's one handler (``LOG_FORMAT``)."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Serve the HTTP app: signed webhooks, the API, the web inbox."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    args = parser.parse_args(argv)
    if not 1 <= args.workers <= 64:
        raise UserError("--workers must be between 1 and 64")
    if not 0 < args.port < 65536:
        raise UserError("--port must be between 1 and 65535")

    import uvicorn

    from api.server import TimedH11Protocol
    from core import settings

    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_config=None,  # no text formatter of uvicorn's own: every line is the app's
        access_log=False,  # ops.http writes the access line, with the request id
        proxy_headers=False,  # TRUST_PROXY_HEADERS decides, in the app
        http=TimedH11Protocol,  # a deadline for a request's headers (HEADER_READ_SECONDS)
        # requests get the stop's time, then the lifespan hands back what is still resuming
        timeout_graceful_shutdown=int(settings.SHUTDOWN_SECONDS.get()),
    )
    return 0


@cli_main
def migrate(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Bring the database to this version's schema (every start does it too; this does it
    alone, e.g. as a deploy step before new processes start)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Create the tables, or apply the migrations after the database's version, "
        "then exit. Every process does this on start-up; run it alone as a deploy step.",
    )
    parser.parse_args(argv)
    from store.db import open_store
    from store.migrations import SCHEMA_VERSION

    with open_store():
        say(f"schema at version {SCHEMA_VERSION}")
    return 0
