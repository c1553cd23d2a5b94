"""The forked child's side of the fork server (``testkit.zygote``): become the new interpreter
the caller asked for (its streams, session, folder, environment, arguments, ``sys.path`` and
signal dispositions), run its script or module as ``__main__`` and exit as ``Py_FinalizeEx``
would. Standard library only: it runs in the zygote, where no product module is imported."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, NoReturn


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


def become(
    request: dict[str, Any], fds: list[int], path: list[str], signals: Mapping[int, Any]
) -> None:
    """In the child: the caller's streams, session, folder, environment and arguments;
    ``path`` is its ``sys.path`` and ``signals`` the dispositions of a new interpreter."""
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
    for sig, handler in signals.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass  # SIGKILL, SIGSTOP: never changed
    _std_streams()
    sys.argv = list(request["argv"])
    sys.orig_argv = list(request["orig_argv"])
    sys.path[:] = path
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


def run(request: dict[str, Any], preloaded: Mapping[str, Any]) -> NoReturn:
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
