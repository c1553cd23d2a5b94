"""Benchmarks: the worker's cost measured against the floors set by its own dependencies.

Every figure is a ratio against a floor measured in the same run on the same machine (raw
LangGraph on the same checkpointer, a bare FastAPI endpoint under the same uvicorn, the import of
LangGraph itself), because absolute numbers on a shared, noisy 2-core box mean little on their
own. ``uv run python -m bench`` runs it all and writes ``bench/RESULTS.md``.
"""
