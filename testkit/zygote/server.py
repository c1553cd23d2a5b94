"""The fork server itself (``testkit.zygote``), run as its own process once per pytest worker:
it imports the libraries the product's processes use (never the product), starts no thread,
and forks a child for each request, reporting each exit (``child.py`` is the child's side)."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # testkit/zygote/ itself: its modules may not shadow a library's import; the child's side
    # is imported from there first (standard library only)
    import child as forked

    del sys.path[0]

import json
import os
import selectors
import signal
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

# The dispositions a new interpreter started from the caller has (this process is one):
# restored in each child, whatever the preloaded libraries set.
_SIGNALS = {sig: signal.getsignal(sig) for sig in signal.valid_signals()}

# The libraries the product's processes import (its imports of third-party and standard
# modules, and what uvicorn loads to serve): never a product module.
PRELOAD = (
    # the heavy ones
    "langgraph.graph",
    "langgraph.graph.state",
    "langgraph.types",
    "langgraph.config",
    "langgraph.prebuilt",
    "langgraph.checkpoint.base",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.postgres",
    "langchain_core.messages",
    "langchain_core.runnables",
    "langchain_core.tracers.context",
    "langchain_core.tracers.stdout",
    "langsmith",
    "langsmith.run_trees",
    "pydantic",
    "pydantic.json_schema",
    "pydantic_settings",
    "psycopg",
    "psycopg.rows",
    "psycopg_pool",
    "fastapi",
    "fastapi.concurrency",
    "fastapi.exceptions",
    "fastapi.responses",
    "fastapi.security",
    "fastapi.staticfiles",
    "fastapi.templating",
    "starlette.concurrency",
    "starlette.exceptions",
    "starlette.requests",
    "starlette.routing",
    "uvicorn",
    "uvicorn.main",
    "uvicorn.config",
    "uvicorn.server",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.loops.asyncio",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.protocols.websockets.websockets_sansio_impl",
    "uvicorn.middleware.proxy_headers",
    "uvicorn.supervisors",
    "httpx",
    "anthropic",
    # the lighter ones the product imports
    "babel.dates",
    "babel.numbers",
    "cryptography.hazmat.primitives.asymmetric.ed25519",
    "disarm",
    "dotenv",
    "h11",
    "jsonschema",
    "jwt",
    "mangum",
    "markupsafe",
    "opentelemetry.trace",
    "opentelemetry.trace.propagation.tracecontext",
    "opentelemetry.sdk.resources",
    "opentelemetry.sdk.trace",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "prometheus_client",
    "slack_sdk",
    "slack_sdk.signature",
    "standardwebhooks.webhooks",
    # the standard library's
    "argparse",
    "asyncio",
    "concurrent.futures",
    "csv",
    "decimal",
    "difflib",
    "email.message",
    "email.utils",
    "getpass",
    "importlib.metadata",
    "multiprocessing",
    "multiprocessing.connection",
    "multiprocessing.spawn",
    "smtplib",
    "sqlite3",
    "ssl",
    "tomllib",
    "uuid",
    "zoneinfo",
)

# Modules that copy the whole environment as they are imported; each child copies it again.
_ENVIRON_COPIES = ("wsgiref.handlers",)  # BaseHandler.os_environ (uvicorn's WSGI middleware)
_ENVIRON_INTERNALS = ("os", "collections.abc", "_collections_abc")

# Variables the interpreter reads as it starts (besides ``PYTHON*``): a child whose value differs
# from the zygote's is started by ``subprocess``. ``TZ`` is not one: each child runs tzset().
_STARTUP_NAMES = frozenset({"HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE"})


# -- the zygote -----------------------------------------------------------------------------------


def _preload(names: Sequence[str]) -> tuple[frozenset[str], list[str]]:
    """Import ``names``; return the environment variables they read while importing (a child
    must have the same values: those libraries keep what they read) and the ones missing."""
    import importlib

    environ = type(os.environ)
    getitem, iterate = environ.__getitem__, environ.__iter__
    read: set[str] = set()

    def copier() -> bool:
        """Whether the read is one of a module in ``_ENVIRON_COPIES`` (fixed up in each child)."""
        frame: Any = sys._getframe(2)
        while frame is not None and frame.f_globals.get("__name__") in _ENVIRON_INTERNALS:
            frame = frame.f_back
        return frame is not None and frame.f_globals.get("__name__") in _ENVIRON_COPIES

    def traced_getitem(self: Any, key: str) -> str:
        if not copier():
            read.add(key)
        return getitem(self, key)

    def traced_iter(self: Any) -> Any:
        if not copier():
            read.add("*")  # a copy of the whole environment, kept who knows where
        return iterate(self)

    missing = []
    environ.__getitem__ = traced_getitem  # type: ignore[method-assign]
    environ.__iter__ = traced_iter  # type: ignore[method-assign]
    try:
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError:
                missing.append(name)
    finally:
        environ.__getitem__ = getitem  # type: ignore[method-assign]
        environ.__iter__ = iterate  # type: ignore[method-assign]
    return frozenset(read), missing


class _Zygote:
    def __init__(self, listener: socket.socket, watched: frozenset[str]) -> None:
        self.listener = listener
        self.env = dict(os.environ)
        self.watched = watched
        self.base_path = list(sys.path)  # after site; the zygote runs with no PYTHONPATH
        self.selector = selectors.DefaultSelector()
        self.conns: dict[int, socket.socket] = {}  # fileno -> a caller's connection
        self.pidfds: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)

    def refusal(self, request: Mapping[str, Any]) -> str | None:
        """Why a fork would not start the request as a new interpreter would (or None)."""
        env = request["env"]
        if "*" in self.watched:
            return "a preloaded library copied the whole environment"
        for name in sorted({*self.env, *env}):
            interpreter = name.startswith("PYTHON") and name != "PYTHONPATH"
            if (interpreter or name in _STARTUP_NAMES or name in self.watched) and env.get(
                name
            ) != self.env.get(name):
                return f"{name} differs from the zygote's"
        if not os.path.isdir(request["cwd"]):
            return "no such working directory"
        if time.monotonic() > request["deadline"]:
            return "the caller gave up waiting"
        if threading.active_count() != 1 or len(os.listdir("/proc/self/task")) != 1:
            return "the zygote runs a thread"  # a fork would copy a lock held
        return None

    def serve(self) -> tuple[dict[str, Any], list[int]] | None:
        """Fork a child per request, report each exit. Returns in a child only (its request and
        stdio fds), or None when the caller ends (EOF on stdin)."""
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(0, selectors.EVENT_READ, "caller")
        while True:
            for key, _ in self.selector.select():
                if key.data == "caller":
                    if not os.read(0, 512):
                        return None
                elif key.data == "accept":
                    conn, _ = self.listener.accept()
                    self.conns[conn.fileno()] = conn
                    self.selector.register(conn, selectors.EVENT_READ, "request")
                elif key.data == "request":
                    child = self.request(self.conns[key.fd])
                    if child is not None:
                        return child
                else:
                    self.reap(key.fd)

    def request(self, conn: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
        self.selector.unregister(conn)
        del self.conns[conn.fileno()]
        try:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        except OSError:
            data, fds = b"", []
        request: dict[str, Any] | None = json.loads(data) if data else None
        refusal = "no request" if request is None else self.refusal(request)
        if refusal is not None or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            self.reply(conn, {"fallback": refusal or "no stdio"})
            conn.close()
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self.close_all()
            conn.close()
            assert request is not None
            return request, fds
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.pidfds[pidfd] = (pid, conn)
        self.selector.register(pidfd, selectors.EVENT_READ, "exit")
        self.reply(conn, {"pid": pid}, [pidfd])
        return None

    def reap(self, pidfd: int) -> None:
        pid, conn = self.pidfds.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
        self.reply(conn, {"returncode": os.waitstatus_to_exitcode(status), "cpu": cpu})
        conn.close()

    @staticmethod
    def reply(conn: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        try:
            socket.send_fds(conn, [json.dumps(message).encode()], list(fds))
        except OSError:
            pass  # the caller is gone (it stopped waiting): nothing to tell

    def close_all(self) -> None:
        """In a child: none of the zygote's descriptors stay open."""
        self.selector.close()
        self.listener.close()
        for conn in self.conns.values():
            conn.close()
        for pidfd, (_, conn) in self.pidfds.items():
            os.close(pidfd)
            conn.close()

    def child_path(self, path0: str, env: Mapping[str, str]) -> list[str]:
        """``sys.path`` as a new interpreter builds it: the script's folder (or the working
        directory for ``-m``), then ``PYTHONPATH``'s entries, made absolute, and the rest, each
        once (site's ``removeduppaths``)."""
        extra = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep)]
        seen: set[str] = set()
        rest = []
        for entry in [*extra, *self.base_path] if env.get("PYTHONPATH") else self.base_path:
            if os.path.normcase(entry) not in seen:
                seen.add(os.path.normcase(entry))
                rest.append(entry)
        return [path0, *rest]


def _zygote_main() -> None:
    listener = socket.socket(fileno=int(sys.argv[1]))
    watched, missing = _preload(PRELOAD)
    if missing:
        print(f"zygote: not preloaded (not installed): {', '.join(missing)}", file=sys.stderr)
    import gc

    gc.collect()
    gc.freeze()  # the preloaded objects stay shared with each child, never scanned again
    preloaded = dict(sys.modules)
    zygote = _Zygote(listener, watched)
    child = zygote.serve()
    if child is None:
        return  # the caller ended
    request, fds = child
    path = zygote.child_path(request["path0"], request["env"])
    del zygote, child, listener
    forked.become(request, fds, path, _SIGNALS)
    del fds
    forked.run(request, preloaded)


if __name__ == "__main__":
    _zygote_main()
