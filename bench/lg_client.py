"""The client code section 15 runs, unchanged, against this product's ``/lg`` and against
``langgraph dev``: the async ``langgraph-sdk`` a LangGraph user writes, ``concurrency`` runs
at a time. A run is started (create a thread, stream a run until it stops on its interrupt) and
later decided (stream a run resuming that interrupt by its id until the graph ends); the two
are separate phases, so every run waits between them and the server's memory can be read with
all of them waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from langgraph_sdk import get_client

TEXT = "Refund order A-1001: the kettle arrived broken"
DECISION = {"decisions": [{"type": "approve"}]}
MODES = ["updates"]


@dataclass
class Pending:
    thread_id: str
    interrupt_id: str
    seconds: float  # start to interrupt: thread created, run streamed until it paused


@dataclass
class Phase:
    seconds: list[float] = field(default_factory=list)  # one per run
    wall: float = 0.0  # the whole phase


class Clients:
    """The requester's and the reviewer's clients (``langgraph dev`` ignores the keys)."""

    def __init__(self, url: str, requester_key: str | None, reviewer_key: str | None):
        self.requester = get_client(url=url, api_key=requester_key, timeout=120)
        self.reviewer = get_client(url=url, api_key=reviewer_key, timeout=120)

    async def assistant(self, graph_id: str) -> str:
        [found] = await self.requester.assistants.search(graph_id=graph_id)
        return found["assistant_id"]

    async def start(self, assistant_id: str) -> Pending:
        t0 = time.perf_counter()
        thread = await self.requester.threads.create()
        paused = None
        given = {"messages": [{"role": "user", "content": TEXT}]}
        async for part in self.requester.runs.stream(
            thread["thread_id"], assistant_id, input=given, stream_mode=MODES
        ):
            if part.event == "error":
                raise RuntimeError(f"start streamed an error: {part.data}")
            if part.event == "updates" and "__interrupt__" in part.data:
                paused = part.data["__interrupt__"][0]
        if paused is None:
            raise RuntimeError(f"thread {thread['thread_id']} ended without an interrupt")
        return Pending(thread["thread_id"], paused["id"], time.perf_counter() - t0)

    async def decide(self, assistant_id: str, pending: Pending) -> float:
        t0 = time.perf_counter()
        finished = False
        command = {"resume": {pending.interrupt_id: DECISION}}
        async for part in self.reviewer.runs.stream(
            pending.thread_id, assistant_id, command=command, stream_mode=MODES
        ):
            if part.event == "error":
                raise RuntimeError(f"decision streamed an error: {part.data}")
            finished = finished or (part.event == "updates" and "finish" in part.data)
        if not finished:
            raise RuntimeError(f"thread {pending.thread_id} did not finish after its decision")
        return time.perf_counter() - t0

    async def close(self) -> None:
        for client in (self.requester, self.reviewer):
            await client.aclose()


async def _pool(n: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> float:
    """``one(i)`` for ``i < n``, at most ``concurrency`` at a time; the wall seconds."""
    todo = list(range(n))[::-1]

    async def lane() -> None:
        while todo:
            await one(todo.pop())

    t0 = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(lane() for _ in range(concurrency))), 600)
    return time.perf_counter() - t0


async def start_all(
    clients: Clients, assistant_id: str, n: int, concurrency: int
) -> tuple[list[Pending], Phase]:
    out: list[Pending | None] = [None] * n

    async def one(i: int) -> None:
        out[i] = await clients.start(assistant_id)

    wall = await _pool(n, concurrency, one)
    started = [p for p in out if p is not None]
    return started, Phase([p.seconds for p in started], wall)


async def decide_all(
    clients: Clients, assistant_id: str, pending: list[Pending], concurrency: int
) -> Phase:
    out = [0.0] * len(pending)

    async def one(i: int) -> None:
        out[i] = await clients.decide(assistant_id, pending[i])

    wall = await _pool(len(pending), concurrency, one)
    return Phase(out, wall)
