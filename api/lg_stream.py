"""``/lg`` streams over server-sent events: ``runs.stream`` starts or resumes a run and follows
it; ``runs.join_stream`` follows one again, from the event after ``Last-Event-ID``.

Events are read from the database (``lg_events``), where the segment carrying the run out
appends them in whichever process it runs, so a stream outlives the process that began it: a
client whose connection dropped (a restart, a deploy) joins again and misses nothing. A stream
sends ``metadata`` (``run_id``, ``attempt``) first, then each event with its number as ``id``,
and closes once the run has ended or paused and every event was sent."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from api.auth import Reader
from api.lg_common import PREFIX, RunBody, runner_of
from api.lg_runs import _run, begin, location
from api.runs import errors
from core import shutdown
from store import lg
from worker.runner import Runner

router = APIRouter(prefix=PREFIX, tags=["langgraph"])
STREAM_SECONDS = 600.0  # a stream closes by then; join_stream carries on from its last id


async def _events(runner: Runner, run: lg.LgRun, after: int) -> AsyncIterator[str]:
    table = runner.store.tables.lg()
    if after == 0:
        yield f"event: metadata\ndata: {json.dumps({'run_id': run.run_id, 'attempt': 1})}\n\n"
    until = time.monotonic() + STREAM_SECONDS
    ended = False
    while True:
        rows = await run_in_threadpool(table.events_after, run.run_id, after)
        for row in rows:
            after = row.seq
            yield f"id: {after}\nevent: {row.event}\ndata: {row.data}\n\n"
        if rows:
            continue
        if ended or shutdown.requested() or time.monotonic() > until:
            return
        current = await run_in_threadpool(table.run, run.thread_id, run.run_id)
        if current is None or not current.open:
            ended = True  # read once more: events appended before it ended
            continue
        await asyncio.sleep(0.05)  # the segment appends, here or in another process


def _answer(runner: Runner, run: lg.LgRun, after: int) -> StreamingResponse:
    headers = {**location(run), "Cache-Control": "no-store"}
    return StreamingResponse(
        _events(runner, run, after), media_type="text/event-stream", headers=headers
    )


@router.post("/threads/{thread_id}/runs/stream", response_model=None, responses=errors(404, 409))
async def stream_run(
    thread_id: str, body: RunBody, request: Request, who: Reader
) -> StreamingResponse:
    """Start (``input``) or resume (``command``) the thread's run and stream it."""
    runner = runner_of(request)
    made, start = await run_in_threadpool(begin, request, thread_id, body, who)
    if start is not None:  # the run's row is written by the start; a dead process's is resumed
        threading.Thread(target=start, name=f"lg-start-{made.run_id[:8]}", daemon=True).start()
    return _answer(runner, made, 0)


@router.get("/threads/{thread_id}/runs/{run_id}/stream", response_model=None, responses=errors(404))
async def join_stream(
    thread_id: str,
    run_id: str,
    request: Request,
    who: Reader,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    """Follow a run's stream again: every event after ``Last-Event-ID`` (all without one)."""
    runner = runner_of(request)
    made = await run_in_threadpool(_run, runner, thread_id, run_id, who)
    after = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
    return _answer(runner, made, after)
