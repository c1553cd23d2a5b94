"""A process started for one run or one event starts without the cyclic garbage collector.

Start-up (importing LangGraph, FastAPI and this product, building the settings model and the
graph) allocates hundreds of thousands of objects and frees almost none, yet every 700 of them
trigger a collection that scans the growing heap for garbage it does not hold: about a tenth
of ``import langgraph.graph`` (bench/NOTES.md, "Issue 39: cold starts"). The entry points that
start a process per run or per event (``run.py``, ``approval-worker run``, the Lambda handler)
call :func:`pause` before their imports; :func:`over` turns the collector back on once
start-up is over (a graph compiled, an event answered), after freezing what start-up made: it
lives as long as the process, so no later collection scans it again. Reference counting frees
memory as always meanwhile; only cycles wait. A process that never paused is left as it is.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def over() -> None:
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
