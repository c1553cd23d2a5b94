"""Log lines an operator can ship and search: one JSON object per line (``LOG_FORMAT=json``) or
plain text, at ``LOG_LEVEL``, each carrying the request and thread it belongs to.

The ids travel in context variables (set by :mod:`ops.http` per request and by the hook per
transition), so any logger anywhere gets them without passing them around. Every message goes
through ``core.errors.scrub`` (the values of sensitive settings become ``***``), and an expected
error is one line: a traceback is kept only for the unexpected ones, and then on one line too.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar

from core import settings, tracing
from core.errors import UserError, scrub

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
thread_id: ContextVar[str | None] = ContextVar("thread_id", default=None)

_HANDLER_NAME = "approval-worker"


def _fields(record: logging.LogRecord) -> dict[str, object]:
    fields: dict[str, object] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "message": scrub(record.getMessage()),
    }
    for key, var in (("request_id", request_id), ("thread_id", thread_id)):
        value = getattr(record, key, None) or var.get()
        if value:
            fields[key] = value
    fields.update(tracing.log_ids())  # {} while tracing is off
    for key in ("method", "path", "status", "duration_ms", "event", "from_status", "to_status"):
        if hasattr(record, key):
            fields[key] = getattr(record, key)
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        fields["error"] = scrub(f"{type(exc).__name__}: {exc}".splitlines()[0])
        if not isinstance(exc, UserError):  # expected errors carry no traceback
            fields["traceback"] = scrub(_one_line_traceback(record))
    return fields


def _one_line_traceback(record: logging.LogRecord) -> str:
    text = logging.Formatter().formatException(record.exc_info)  # type: ignore[arg-type]
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str)


class TextFormatter(logging.Formatter):
    """``time level logger [request thread] message``, one line whatever the error."""

    def format(self, record: logging.LogRecord) -> str:
        f = _fields(record)
        ids = " ".join(str(f[k]) for k in ("request_id", "thread_id") if k in f)
        line = f"{f['time']} {str(f['level']).upper()} {f['logger']}"
        line += f" [{ids}]" if ids else ""
        line += f" {f['message']}"
        if "error" in f:
            line += f" ({f['error']})"
        if "traceback" in f:
            line += f" traceback: {f['traceback']}"
        return line


def configure_logging(level: str = "WARNING") -> None:
    """Install the one handler on the root logger (stderr) and route uvicorn's loggers to it;
    uvicorn's own access log is replaced by :mod:`ops.http`'s, which carries the request id.
    ``level`` applies unless ``LOG_LEVEL`` is set. Idempotent: the CLI wrapper calls it, then the
    app again with ``INFO``."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        # in Lambda the runtime's own handler is there too: each line would be written twice
        if handler.get_name() == _HANDLER_NAME or settings.AWS_LAMBDA_FUNCTION_NAME.get():
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    json_lines = settings.LOG_FORMAT.get() == "json"
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root.addHandler(handler)
    root.setLevel(settings.LOG_LEVEL.get() or level)
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
    access = logging.getLogger("uvicorn.access")
    access.handlers = []
    access.propagate = False
    access.disabled = True
    for noisy in ("httpx", "httpcore"):  # their request lines may carry URLs with tokens
        logging.getLogger(noisy).setLevel(logging.WARNING)


def result(line: str, *, thread: str | None = None, level: str = "info", err: bool = False) -> None:
    """A command's result line (``run``'s pause, each run a sweep handled): plain text, or with
    ``LOG_FORMAT=json`` one JSON record shaped like every log line, so a log shipper parses each
    line a process writes. stdout still carries the answer (stderr with ``err``)."""
    stream = sys.stderr if err else sys.stdout
    if not _json_lines():
        print(line, file=stream, flush=True)
        return
    number = logging.getLevelName(level.upper())
    record = logging.LogRecord("result", number, __file__, 0, line, None, None)
    record.thread_id = thread
    print(JsonFormatter().format(record), file=stream, flush=True)


def _json_lines() -> bool:
    """``LOG_FORMAT=json``; a bad value counts as text (its own error must still be shown)."""
    from core.errors import UserError

    try:
        return settings.LOG_FORMAT.get() == "json"
    except UserError:
        return False


def say(text: object, *, err: bool = False, level: str = "info", flush: bool = True) -> None:
    """Every line of a command's output through :func:`result`: plain lines, or one record per
    line under ``LOG_FORMAT=json``. A command's requested answer (a new key's token, an export,
    ``--version``, the settings table) is written as it is instead, never through here."""
    del flush  # result() always flushes; kept so a print() call converts as it is
    for line in str(text).split("\n"):
        result(line, err=err, level=level)
