"""The agents and the segment runner.

A workflow is a model plus tools; the graph puts an approval gate (LangChain's HITL shape) in
front of every tool that needs a human. :mod:`agent.runner` runs one segment of a thread at a time
and records how it ended, so no process ever waits for a reviewer.
"""
