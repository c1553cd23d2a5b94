"""Graphs that need asyncio (async nodes or tools, an async-only chat model) on the worker's
synchronous checkpointers.

The worker runs segments synchronously over ``SqliteSaver`` / ``PostgresSaver``, whose async
methods raise ``NotImplementedError``; a graph with an async-only part fails under ``stream``.
Such a graph is driven with ``asyncio.run`` over ``astream`` instead, on a copy of the graph whose
checkpointer runs the saver's synchronous methods in a worker thread: the same checkpoints, the
same ``durability="sync"``, the same per-step cancel check (the lease heartbeat is a thread and
does not care). Which graphs need it is decided up front, never by retrying a failed sync run
(its first steps would already be written).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from functools import lru_cache
from typing import Any

_SYNC = (
    "get_tuple",
    "put",
    "put_writes",
    "delete_thread",
    "delete_for_runs",
    "copy_thread",
    "prune",
    "get_delta_channel_history",
    "get_next_version",
)


def _delegate(name: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    async def in_thread(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.inner, name), *args, **kwargs)

    return sync, in_thread


@lru_cache(maxsize=1)
def _threaded_saver() -> type:
    """The adapter class, made on first use (it subclasses LangGraph's saver base, and this
    module must not import LangGraph when it is imported)."""
    from langgraph.checkpoint.base import BaseCheckpointSaver

    class ThreadedSaver(BaseCheckpointSaver[Any]):
        """A synchronous saver with working ``a*`` methods: each runs the sync one in a thread."""

        def __init__(self, inner: BaseCheckpointSaver[Any]):
            super().__init__(serde=inner.serde)
            self.inner = inner

        def list(self, config: Any, **kwargs: Any) -> Any:
            return self.inner.list(config, **kwargs)

        async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
            for item in await asyncio.to_thread(lambda: list(self.inner.list(config, **kwargs))):
                yield item

    for name in _SYNC:
        sync, in_thread = _delegate(name)
        setattr(ThreadedSaver, name, sync)
        if name != "get_next_version":
            setattr(ThreadedSaver, f"a{name}", in_thread)
    return ThreadedSaver


def threaded_saver(inner: Any) -> Any:
    """``inner`` (a sync saver) with async methods that run its sync ones in a thread."""
    return _threaded_saver()(inner)


def needs_async(graph: Any, declared: bool = False) -> bool:
    """True when the graph cannot run synchronously: the workflow says so (an async-only chat
    model cannot be seen from outside), a node is an ``async def``, or a tool has only a
    coroutine."""
    if declared:
        return True
    for tools in tool_nodes(graph):
        for tool in tools.tools_by_name.values():
            if getattr(tool, "coroutine", None) and getattr(tool, "func", None) is None:
                return True
    for node in getattr(graph, "nodes", {}).values():
        bound = getattr(node, "bound", None)
        if getattr(bound, "afunc", None) is not None and getattr(bound, "func", 1) is None:
            return True
    return False


def tool_nodes(graph: Any) -> Iterator[Any]:
    """The graph's ``ToolNode``s. A graph can hold one only once ``langgraph.prebuilt`` has
    been imported (by whoever built it), so a graph without tools never pays that import
    (about 35 ms of a cold ``run.py``)."""
    module = sys.modules.get("langgraph.prebuilt.tool_node")
    if module is None:
        return
    for node in getattr(graph, "nodes", {}).values():
        bound = getattr(node, "bound", None)
        if isinstance(bound, module.ToolNode):
            yield bound


def stream_async(graph: Any, input_: Any, config: dict[str, Any], stop: Callable[[], bool]) -> None:
    """Run the graph to its next pause or end through ``astream``, step by step, stopping early
    when ``stop()`` says so (a cancel intent)."""
    threaded = graph.copy(update={"checkpointer": threaded_saver(graph.checkpointer)})

    async def drive() -> None:
        steps = threaded.astream(input_, config, durability="sync")
        try:
            async for _ in steps:
                if await asyncio.to_thread(stop):
                    break
        finally:
            await steps.aclose()

    asyncio.run(drive())
