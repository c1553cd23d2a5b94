"""A fork server for the suite's Python processes: ``popen`` and ``run`` start ``python
script.py``, ``python -m module`` and the venv's console scripts (``approval-worker``) as forks
of a warm parent that has already imported the heavy libraries, instead of a fresh interpreter
that imports them again (half a second to a second of CPU each, hundreds of times a run).

The parent (the zygote, ``server.py``) runs once per pytest worker, started on first use and
ended with it; each fork becomes the interpreter asked for (``child.py``). This module is the
caller's side: it passes the request and the standard streams over a Unix socket and holds the
child as a ``subprocess.Popen`` (a real process, signalled through a pidfd, its exit status
reported by the zygote).

Anything it cannot start exactly falls back to ``subprocess`` itself: another program, an
interpreter option (``-c``, ``-X``, ``-u``...), a Popen option beyond the streams, ``cwd``,
``env`` and ``start_new_session``, an environment that differs from the zygote's in a
variable the interpreter reads at start (``PYTHON*`` but ``PYTHONPATH``, ``HOME``, the locale)
or one a preloaded library read while it was imported; and every start, once the zygote has
died or could not start. ``TEST_ZYGOTE=0`` turns it off. What differs from a fresh
interpreter: the preloaded modules are already in ``sys.modules`` (a module of that name in the
child's working directory does not shadow them; a test of what a process imports, like the
Lambda cold starts', starts it with ``-c`` or ``subprocess``), children share the zygote's hash
seed, and at exit only the child's own modules are torn down (``child._finish``).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")

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
                [sys.executable, SERVER, str(listener.fileno())],
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
