"""A fork server for the suite's Python processes: ``popen`` and ``run`` start ``python
script.py``, ``python -m module`` and the venv's console scripts (``approval-worker``) as forks
of a warm parent that has already imported the heavy libraries, instead of a fresh interpreter
that imports them again (half a second to a second of CPU each, hundreds of times a run).

The parent (the zygote) is this file run as its own process, once per pytest worker, started
on first use and ended with it. It imports third-party and standard libraries only, never the
product (which reads its settings and keeps state in its modules), and runs no thread. For each
process it forks a child that takes the caller's stdin/stdout/stderr (passed over a Unix
socket), environment, working directory and arguments, sets up ``sys`` as ``python script.py``
or ``python -m module`` would (``sys.argv``, ``sys.path``, a fresh ``__main__``, the signal
dispositions and standard streams of a new interpreter), runs the code and exits as the
interpreter would. The zygote reaps it and reports its exit status (Popen's returncode) to the
caller, which holds it as a ``subprocess.Popen``: a real process, signalled by its pid (a
pidfd), its pipes those of ``subprocess``.

Anything it cannot start exactly falls back to ``subprocess`` itself: another program, an
interpreter option (``-c``, ``-X``, ``-u``...), a Popen option beyond the streams, ``cwd``,
``env`` and ``start_new_session``, an environment that differs from the zygote's in a
variable the interpreter reads at start (``PYTHON*`` but ``PYTHONPATH``, ``HOME``, the locale)
or one a preloaded library read while it was imported; and every start, once the zygote has
died or could not start. ``TEST_ZYGOTE=0`` turns it off. What differs from a fresh
interpreter: the preloaded modules are already in ``sys.modules`` (a module of that name in the
child's working directory does not shadow them; a test of what a process imports, like the
Lambda cold starts', starts it with ``-c`` or ``subprocess``), children share the zygote's hash
seed, and at exit only the child's own modules are torn down (see ``_finish``).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # testkit/ itself: none of its modules (mail, web, proxy...) may shadow a library's import
    del sys.path[0]

import json
import os
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

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


def _std_streams() -> None:
    """New ``sys.stdin/stdout/stderr`` over fds 0-2, made as the interpreter makes them at start
    (pylifecycle's ``create_stdio``), with the encodings, error handlers and buffering
    (``PYTHONUNBUFFERED``, the zygote's) it chose."""
    import io

    unbuffered = sys.__stdout__ is not None and sys.__stdout__.write_through
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, f"__{name}__")
        write = fd > 0
        buffering = 0 if unbuffered and write else -1
        buffer: Any = open(fd, "wb" if write else "rb", buffering, closefd=False)
        raw = buffer if buffering == 0 else buffer.raw
        raw.name = f"<{name}>"
        line_buffering = not unbuffered and (raw.isatty() or fd == 2)
        stream = io.TextIOWrapper(
            buffer, old.encoding, old.errors, "\n", line_buffering, unbuffered
        )
        stream.mode = "w" if write else "r"  # type: ignore[misc]
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _become(zygote: _Zygote, request: dict[str, Any], fds: list[int]) -> None:
    """In the child: the caller's streams, session, folder, environment and arguments."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        os.close(fd)
    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    time.tzset()
    for sig, handler in _SIGNALS.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass  # SIGKILL, SIGSTOP: never changed
    _std_streams()
    sys.argv = list(request["argv"])
    sys.orig_argv = list(request["orig_argv"])
    sys.path[:] = zygote.child_path(request["path0"], env)
    # what the preloaded modules took from the zygote's start
    if "multiprocessing.process" in sys.modules:
        import multiprocessing.process as mp

        mp.ORIGINAL_DIR = os.path.abspath(os.getcwd())  # type: ignore[attr-defined]
        mp.current_process().authkey = os.urandom(32)
    if "wsgiref.handlers" in sys.modules:
        from wsgiref import handlers

        handlers.BaseHandler.os_environ = handlers.read_environ()
    if "tempfile" in sys.modules:
        import tempfile

        tempfile.tempdir = None  # from TMPDIR of this process, when first asked
    import importlib

    importlib.invalidate_caches()


def _run(request: dict[str, Any], preloaded: Mapping[str, Any]) -> NoReturn:
    """Run the script or module as ``__main__``; exit as the interpreter would."""
    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__annotations__ = {}
    sys.modules["__main__"] = main
    interrupted = False
    try:
        if request.get("module"):
            import runpy

            # what ``python -m`` runs
            runpy._run_module_as_main(request["module"], alter_argv=True)  # type: ignore[attr-defined]  # noqa: SLF001
        else:
            from importlib.machinery import SourceFileLoader

            path = request["script"]
            main.__file__ = path
            main.__cached__ = None  # type: ignore[attr-defined]
            main.__loader__ = SourceFileLoader("__main__", path)
            with open(path, "rb") as f:
                source = f.read()
            exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as exc:
        status = _system_exit(exc.code)
    except BaseException as exc:  # noqa: BLE001 - printed and exited on, as the interpreter does
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # the traceback starts where a new interpreter's would
        exc.__traceback__ = tb  # what the hook prints (not its third argument)
        sys.excepthook(type(exc), exc, tb)
        interrupted = isinstance(exc, KeyboardInterrupt)
        status = 1
        del exc, tb
    else:
        status = 0
    del main  # held by sys.modules alone, as a new interpreter's
    _finish(status, preloaded, interrupted)


def _system_exit(code: object) -> int:
    """The exit status of ``raise SystemExit(code)`` (``_Py_HandleSystemExit``)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code if -(2**31) <= code < 2**31 else -1
    sys.stderr.write(f"{code}\n")
    return 1


def _finish(status: int, preloaded: Mapping[str, Any], interrupted: bool) -> NoReturn:
    """Exit as ``Py_FinalizeEx`` does: wait for the threads, run the atexit functions, tear
    down the modules and flush the standard streams (a failing stdout: 120). The teardown is of
    the child's own modules (those the zygote had are never cleared, so their pages stay
    shared: clearing them cost a tenth of a second a child), and only with no daemon thread
    left to find a module cleared under it (a new interpreter stops those first)."""
    import atexit

    threading._shutdown()  # type: ignore[attr-defined]  # noqa: SLF001
    atexit._run_exitfuncs()
    if threading.active_count() == 1:
        _teardown(preloaded)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            if stream is sys.stdout:
                sys.stderr.write(f"Exception ignored in: {stream!r}\n")
                status = 120
    if interrupted:  # an uncaught KeyboardInterrupt ends the interpreter by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def _teardown(preloaded: Mapping[str, Any]) -> None:
    """``finalize_modules`` for the child's own modules: out of ``sys.modules`` and collected
    (what only they held is finalized: files flushed, connections closed); then, last imported
    first, the names of each one still alive set to None (those with one leading underscore
    first) and collected again."""
    import gc
    import weakref

    own = []
    for name, module in list(sys.modules.items()):
        if preloaded.get(name) is not module:
            del sys.modules[name]
            try:
                own.append(weakref.ref(module))
            except TypeError:
                pass  # not a module: nothing to clear
    del module
    gc.collect()
    for ref in reversed(own):
        names = getattr(ref(), "__dict__", None)
        if names is None:
            continue
        for key in [k for k in names if k.startswith("_") and not k.startswith("__")]:
            names[key] = None
        for key in [k for k in names if k != "__builtins__"]:
            names[key] = None
    gc.collect()


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
    _become(zygote, request, fds)
    del zygote, child, fds, listener
    _run(request, preloaded)


# -- the caller ------------------------------------------------------------------------------------

PIPE, STDOUT, DEVNULL = subprocess.PIPE, subprocess.STDOUT, subprocess.DEVNULL
START_TIMEOUT = 60.0  # for the zygote's import, on a loaded machine, before the first fork

# the Popen options a fork can honour (with these values only, for the last ones)
_HONOURED = {"stdin", "stdout", "stderr", "cwd", "env", "text", "universal_newlines"}
_HONOURED |= {"encoding", "errors", "bufsize", "start_new_session"}
_DEFAULTS: dict[str, Any] = {
    "executable": None,
    "preexec_fn": None,
    "close_fds": True,
    "shell": False,
    "restore_signals": True,
    "pass_fds": (),
    "user": None,
    "group": None,
    "extra_groups": None,
    "umask": -1,
    "process_group": None,
}


def enabled() -> bool:
    """In a pytest process unless ``TEST_ZYGOTE=0``; elsewhere (a benchmark starting its servers
    with testkit measures real processes) only with ``TEST_ZYGOTE=1``."""
    setting = os.environ.get("TEST_ZYGOTE", "")
    return setting != "0" and ("pytest" in sys.modules or setting == "1")


class _Server:
    """This process's zygote: started on first use, ended with the process (or ``stop``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.folder: str | None = None
        self.broken = False
        self.forks = 0
        self.cpu = 0.0  # the CPU seconds of the children the zygote reaped
        self.fallbacks: dict[str, int] = {}

    def address(self) -> str | None:
        with self.lock:
            if self.broken:
                return None
            if self.proc is None:
                try:
                    self.start()
                except OSError:
                    self.broken = True
                    return None
            assert self.folder is not None
            return os.path.join(self.folder, "socket")

    def start(self) -> None:
        import atexit
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="zygote-")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            listener.bind(os.path.join(self.folder, "socket"))
            listener.listen(64)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            # a request waits in the listen queue until the zygote has imported: no handshake
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), str(listener.fileno())],
                stdin=PIPE,  # its lifeline: EOF when this process ends
                stdout=DEVNULL,
                pass_fds=[listener.fileno()],
                cwd=self.folder,
                env=env,
            )
        finally:
            listener.close()
        atexit.register(self.stop)

    def stop(self) -> None:
        """End the zygote (its children run on); later starts use ``subprocess``."""
        import shutil

        with self.lock:
            self.broken = True
            proc, self.proc = self.proc, None
            if proc is not None:
                assert proc.stdin is not None
                proc.stdin.close()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None

    def fork(self, request: dict[str, Any], stdio: Sequence[int]) -> tuple[int, socket.socket, int]:
        """The child's pid, the connection its exit status will come on, and its pidfd; or
        raises ``_Fallback``."""
        address = self.address()
        if address is None:
            raise _Fallback("no zygote")
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.settimeout(START_TIMEOUT + 5)
        request["deadline"] = time.monotonic() + START_TIMEOUT
        try:
            conn.connect(address)
        except OSError as exc:  # the zygote died: never again
            conn.close()
            self.broken = True
            raise _Fallback(f"the zygote failed: {exc!r}") from None
        try:
            socket.send_fds(conn, [json.dumps(request).encode()], list(stdio))
        except OSError as exc:  # a closed standard stream of this process, say
            conn.close()
            raise _Fallback(f"cannot pass the streams: {exc!r}") from None
        try:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 1)
        except OSError as exc:  # the zygote died, or took too long: never again
            conn.close()
            self.broken = True
            raise _Fallback(f"the zygote failed: {exc!r}") from None
        reply = json.loads(data) if data else {"fallback": "the zygote ended"}
        if "pid" not in reply or len(fds) != 1:
            conn.close()
            for fd in fds:
                os.close(fd)
            if not data:
                self.broken = True
            raise _Fallback(reply.get("fallback", "no pid"))
        conn.settimeout(None)
        self.forks += 1
        return int(reply["pid"]), conn, fds[0]


_SERVER = _Server()


class _Fallback(Exception):
    pass


def stop() -> None:
    """End this process's zygote (at the session's end)."""
    _SERVER.stop()


def stats() -> dict[str, Any]:
    return {"forks": _SERVER.forks, "cpu": _SERVER.cpu, "fallbacks": dict(_SERVER.fallbacks)}


def _shebang_python(path: str) -> bool:
    """A script the kernel would start with this very interpreter (a console script)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(4096)
    except OSError:
        return False
    return first.rstrip(b"\r\n") == b"#!" + os.fsencode(sys.executable)


def _plan(args: Any, kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the zygote would run for ``Popen(args, **kwargs)``, or None to use subprocess."""
    if not enabled() or _SERVER.broken or isinstance(args, (str, bytes, os.PathLike)):
        return None
    if set(kwargs) - _HONOURED - set(_DEFAULTS):
        return None
    for name, default in _DEFAULTS.items():
        if (
            name in kwargs
            and kwargs[name] != default
            and not (name == "pass_fds" and not kwargs[name])
        ):
            return None
    try:
        argv = [os.fspath(a) for a in args]
    except TypeError:
        return None
    if not argv or not all(isinstance(a, str) for a in argv):
        return None
    if argv[0] == sys.executable:
        rest = argv[1:]
    elif os.sep in argv[0] and _shebang_python(argv[0]):
        rest = argv  # the kernel runs ``python <script> <args>``
    else:
        return None
    cwd = os.path.abspath(os.fspath(kwargs.get("cwd") or os.getcwd()))
    env = kwargs.get("env")
    env = dict(os.environ if env is None else env)
    if not all(isinstance(k, str) and isinstance(v, str) and "=" not in k for k, v in env.items()):
        return None
    plan: dict[str, Any] = {"cwd": cwd, "env": env, "orig_argv": [sys.executable, *rest]}
    plan["new_session"] = bool(kwargs.get("start_new_session"))
    if len(rest) >= 2 and rest[0] == "-m" and rest[1] and not rest[1].startswith("-"):
        plan.update(module=rest[1], argv=["-m", *rest[2:]], path0=cwd)
        return plan
    if not rest or rest[0].startswith("-"):
        return None  # an interpreter option, or no script: the interpreter's own business
    script = os.path.join(cwd, rest[0])
    try:
        with open(script, "rb") as f:
            head = f.read(4)
    except OSError:
        return None  # let the interpreter say it cannot open it
    if not os.path.isfile(script) or head.startswith(b"PK\x03\x04"):
        return None  # a folder or a zip with a __main__.py
    script = os.path.abspath(script)
    plan.update(script=script, argv=rest, path0=os.path.dirname(os.path.realpath(script)))
    return plan


class ZygotePopen(subprocess.Popen[Any]):
    """A ``subprocess.Popen`` whose child the zygote forked (or, when it could not, a real
    ``subprocess`` child: then every method is Popen's own)."""

    def __init__(self, args: Any, plan: dict[str, Any], **kwargs: Any) -> None:
        self._plan: dict[str, Any] | None = plan
        self._conn: socket.socket | None = None
        self._pidfd: int | None = None
        self.forked = False  # whether the zygote started it (not ``subprocess``)
        super().__init__(args, **kwargs)

    def _execute_child(
        self,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: Any,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: Any,
        shell: Any,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *rest: Any,
    ) -> None:
        plan, self._plan = self._plan, None
        assert plan is not None
        stdio = [p2cread, c2pwrite, errwrite]
        stdio = [fd if fd != -1 else target for target, fd in enumerate(stdio)]
        try:
            self.pid, self._conn, self._pidfd = _SERVER.fork(plan, stdio)
        except _Fallback as exc:
            reason = str(exc)
            _SERVER.fallbacks[reason] = _SERVER.fallbacks.get(reason, 0) + 1
            super()._execute_child(  # type: ignore[misc]
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                *rest,
            )  # fmt: skip
            return
        self._child_created = True
        self.forked = True
        self._close_pipe_fds(  # type: ignore[attr-defined]
            p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite
        )

    def _exited(self, message: bytes, deadstate: int | None) -> None:
        """The zygote's report (``b""``: it ended without one)."""
        assert self._conn is not None and self._pidfd is not None
        if message:
            report = json.loads(message)
            self.returncode = report["returncode"]
            _SERVER.cpu += report["cpu"]
        elif deadstate is not None:
            self.returncode = deadstate
        else:
            raise subprocess.SubprocessError(
                f"the zygote ended before it reported the exit of process {self.pid}"
            )
        self._conn.close()
        os.close(self._pidfd)
        self._conn = self._pidfd = None

    def _internal_poll(self, _deadstate: int | None = None, **kwargs: Any) -> int | None:
        if self._conn is None:
            return super()._internal_poll(_deadstate, **kwargs)  # type: ignore[misc]
        if self.returncode is None and self._waitpid_lock.acquire(False):  # type: ignore[attr-defined]
            try:
                if self.returncode is None and self._conn is not None:
                    try:
                        message = self._conn.recv(1 << 16, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        return None
                    self._exited(message, _deadstate)
            finally:
                self._waitpid_lock.release()  # type: ignore[attr-defined]
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        if self._conn is None:
            return super()._wait(timeout)  # type: ignore[misc]
        endtime = None if timeout is None else time.monotonic() + timeout
        with self._waitpid_lock:  # type: ignore[attr-defined]
            while self.returncode is None and self._conn is not None:
                remaining = None if endtime is None else max(0.0, endtime - time.monotonic())
                with selectors.DefaultSelector() as selector:
                    selector.register(self._conn, selectors.EVENT_READ)
                    if not selector.select(remaining):
                        raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
                self._exited(self._conn.recv(1 << 16), None)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self._pidfd is None:
            return super().send_signal(sig)
        self.poll()
        if self.returncode is None and self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass  # it has just exited; the report is on its way


def popen(args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **kwargs)``, forked from the zygote where it can be."""
    plan = _plan(args, kwargs)
    if plan is None:
        return subprocess.Popen(args, **kwargs)
    return ZygotePopen(args, plan, **kwargs)


def run(
    args: Any,
    *,
    input: Any = None,  # noqa: A002 - subprocess.run's name
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(args, ...)``, forked from the zygote where it can be (its code, with
    ``popen`` for ``Popen``)."""
    if input is not None:
        if kwargs.get("stdin") is not None:
            raise ValueError("stdin and input arguments may not both be used.")
        kwargs["stdin"] = PIPE
    if capture_output:
        if kwargs.get("stdout") is not None or kwargs.get("stderr") is not None:
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        kwargs["stdout"] = kwargs["stderr"] = PIPE
    with popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()  # communicate put the output so far into the exception
            raise
        except BaseException:
            process.kill()  # __exit__ waits
            raise
        retcode = process.wait()
        if check and retcode:
            raise subprocess.CalledProcessError(retcode, process.args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(process.args, retcode, stdout, stderr)


if __name__ == "__main__":
    _zygote_main()
