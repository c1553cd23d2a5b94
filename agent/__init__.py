"""The agents, their model adapters, and the segment runner.

A built-in workflow is tools + a policy + a model (Claude when ``ANTHROPIC_API_KEY`` is set, a
deterministic offline model otherwise); its graph puts an approval gate (LangChain's HITL shape)
in front of the calls the policy sends to a human. Any other graph that pauses in that shape,
such as ``create_agent`` with ``HumanInTheLoopMiddleware``, plugs in as a workflow factory.
:mod:`agent.runner` runs one segment of a thread at a time and records how it ended, so no
process ever waits for a reviewer.
"""
