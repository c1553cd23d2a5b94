"""What every entry point shares: settings from ``.env`` checked at start-up, one-line errors,
exit codes (0 done or paused, 1 a run failed or the database could not be reached, 2 bad input
or settings)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from core import settings
from core.errors import UserError, one_line, scrub

T = TypeVar("T")


def load_settings() -> None:
    """Read ``.env`` from the working directory; real environment variables win."""
    from dotenv import load_dotenv

    load_dotenv(".env", override=False)


def prepare() -> None:
    """What every entry point does before its work: ``.env``, the settings' checks (a
    ``UserError``), then the log lines' shape, which settings choose."""
    load_settings()
    settings.check()
    from core.logs import configure_logging  # one place decides how lines look

    configure_logging()


def exit_refused(exc: UserError, code: int = 2) -> NoReturn:
    """``error: ...`` and exit 2 from inside a server's start-up, where ``SystemExit`` would be
    caught: uvicorn reports a failed lifespan with a traceback and exits 3."""
    from core.logs import say

    say(f"error: {scrub(str(exc))}", err=True, level="error")
    sys.stdout.flush()
    os._exit(code)


def _database_error(exc: BaseException) -> bool:
    """A driver's connection-level failure (psycopg, its pool, SQLite): the database, not the
    command, is at fault."""
    module = type(exc).__module__
    return (
        module.startswith(("psycopg", "sqlite3"))
        and "Operational" in type(exc).__name__
        or (module.startswith("psycopg_pool") and type(exc).__name__ == "PoolTimeout")
    )


def _check_arguments(argv: list[str]) -> None:
    """Arguments must be valid text: invalid UTF-8 arrives as lone surrogates, which nothing
    can store or print."""
    for i, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"argument {i} is not valid UTF-8 text") from None


def cli_main(fn: Callable[..., T]) -> Callable[..., T]:
    """Wrap an entry point: load and check settings; a ``UserError`` prints ``error: ...`` and
    exits 2 (before anything was written if it came from a setting); a database that cannot be
    reached exits 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        from core.logs import say  # an error is a log record too under LOG_FORMAT=json

        try:
            _check_arguments(sys.argv[1:])
            prepare()
            return fn(*args, **kwargs)
        except RecursionError:
            say("error: the input is nested too deeply", err=True, level="error")
            sys.exit(2)
        except UserError as exc:
            say(f"error: {scrub(str(exc))}", err=True, level="error")
            sys.exit(exc.exit_code)
        except Exception as exc:
            if not _database_error(exc):
                raise
            say(
                f"error: the database could not be reached: {one_line(exc)}",
                err=True,
                level="error",
            )
            sys.exit(1)
        except KeyboardInterrupt:
            sys.exit(130)

    return wrapper
