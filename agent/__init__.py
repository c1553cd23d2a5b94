"""The demo workflows: refunds and purchase orders, their tools, models, policy and ledgers.

A workflow is tools + a policy + a model (Claude when ``ANTHROPIC_API_KEY`` is set, a
deterministic offline model otherwise); its graph puts an approval gate (LangChain's HITL shape)
in front of the calls the policy sends to a human. They plug into the worker as
:class:`worker.workflows.Workflow`s; nothing in the worker depends on them.
"""
