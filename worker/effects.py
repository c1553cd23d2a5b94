"""Side effects inside a graph's nodes, done once.

LangGraph re-runs an interrupted node from its first line when it resumes, so whatever the node
did before ``interrupt()`` happens again (and again, in a parallel pause, each time a sibling is
answered). :func:`once` records the effect's result as a receipt (``store.receipts``) under a key
made of the thread, the node's task and the name given; the re-run finds the receipt and gets
the recorded result back instead of acting twice::

    from langgraph.types import interrupt
    from worker.effects import once

    def notify_and_ask(state):
        sent = once("email", lambda: {"message_id": send_email(state["to"])})
        answer = interrupt({"question": "Ship it?", "email": sent["message_id"]})
        ...

The worker binds its receipts while it runs a segment; outside the worker (a plain
``graph.invoke`` in a test), ``once`` simply acts.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from store.receipts import Receipts

_RECEIPTS: contextvars.ContextVar[Receipts | None] = contextvars.ContextVar(
    "receipts", default=None
)


@contextmanager
def bound(receipts: Receipts) -> Iterator[None]:
    """Make ``receipts`` the ones :func:`once` uses while a segment runs (LangGraph runs nodes
    in copies of this context, sync or async)."""
    token = _RECEIPTS.set(receipts)
    try:
        yield
    finally:
        _RECEIPTS.reset(token)


def once(name: str, act: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``act()`` once per node task and ``name``, its JSON result recorded; a re-run of the
    node (after a resume, a retry, a crash) gets the recorded result. ``act`` should still be
    idempotent downstream where it can be: a process can die between acting and recording."""
    from langgraph.config import get_config

    receipts = _RECEIPTS.get()
    if receipts is None:
        return act()
    configurable = get_config().get("configurable", {})
    thread_id = str(configurable.get("thread_id", ""))
    task = str(configurable.get("checkpoint_ns", ""))  # "node:<task id>", stable across re-runs
    key = f"{thread_id}:{task}:{name}:v1"
    return receipts.once(key, thread_id=thread_id, tool=name, act=act)
