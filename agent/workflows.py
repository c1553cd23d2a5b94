"""The workflows a run can be started with, and how to bring your own graph.

A built-in workflow is tools + policy + a system prompt, driven by Claude when
``ANTHROPIC_API_KEY`` is set and by its deterministic offline model otherwise. Any other graph
(e.g. ``langchain.agents.create_agent`` with ``HumanInTheLoopMiddleware``) becomes a workflow
through a factory that compiles it over the checkpointer it is given: register it in-process with
:func:`register_workflow`, or name it as ``package.module:factory`` so that every process
(``run.py``, ``recover.py``, the webhook) can import it from the name stored on the run.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agent.graph import build_graph
from agent.models import ChatModel, OfflinePurchaseOrderModel, OfflineRefundModel
from agent.policy import ApprovalRule, Policy, expires_in_setting
from agent.tools import PURCHASE_ORDER_TOOLS, REFUND_TOOLS, Tool
from store.errors import UserError
from store.ledger import Ledger
from store.receipts import Receipts

REFUND_PROMPT = """\
You handle refund requests for an online shop. Look every order up with lookup_order before \
refunding it, refund at most the order total with issue_refund, and pass the customer's reason. \
Some refunds wait for a human reviewer. When a tool result says a reviewer rejected a call, or \
replaced its arguments, accept that and never propose the original call again. Finish with one \
short sentence for the customer that says what was done."""

PURCHASE_ORDER_PROMPT = """\
You place purchase orders for a company. Before ordering, check the cost center's remaining \
budget with check_budget and find the cheapest supplier with find_supplier; then place the order \
with create_purchase_order at the supplier's unit price, with the requester's justification. Do \
not order more than the remaining budget allows. Some orders wait for a human reviewer. When a \
tool result says a reviewer rejected a call, or replaced its arguments, accept that and never \
propose the original call again. Finish with one short sentence that says what was ordered."""


class Workflow(Protocol):
    """What the runner needs from a workflow: a graph over a checkpointer, and the argument
    schemas edits are checked against."""

    name: str

    def build(self, checkpointer: Any, ledger: Ledger, receipts: Receipts) -> Any: ...

    def args_schemas(self, graph: Any) -> dict[str, dict]: ...

    def model_name(self) -> str: ...


def claude_configured() -> bool:
    return bool(os.environ.get("ANTHROPIC_API_KEY"))


@dataclass(frozen=True)
class AgentWorkflow:
    """A built-in workflow on :func:`agent.graph.build_graph`."""

    name: str
    tools: tuple[Tool, ...]
    policy: Policy
    system_prompt: str
    offline: Callable[[], ChatModel]

    def model(self) -> ChatModel:
        if claude_configured():
            from agent.claude import ClaudeModel  # cheap: the SDK is imported on first call

            return ClaudeModel(self.system_prompt)
        return self.offline()

    def model_name(self) -> str:
        return self.model().name

    def build(self, checkpointer: Any, ledger: Ledger, receipts: Receipts) -> Any:
        self.policy.check_settings()
        return build_graph(self.model(), self.tools, self.policy, ledger, receipts, checkpointer)

    def args_schemas(self, graph: Any = None) -> dict[str, dict]:
        return {t.name: t.args_schema for t in self.tools}

    def expires_in(self) -> float:
        return self.policy.expires_in()


def tool_schemas(graph: Any) -> dict[str, dict]:
    """Argument schemas of the tools in a graph's ``ToolNode``s (what ``create_agent`` builds),
    so reviewers' edits are checked against them before the run resumes."""
    from langgraph.prebuilt import ToolNode

    schemas: dict[str, dict] = {}
    for node in getattr(graph, "nodes", {}).values():
        bound = getattr(node, "bound", None)
        if isinstance(bound, ToolNode):
            for name, tool in bound.tools_by_name.items():
                schema = tool.tool_call_schema
                if isinstance(schema, dict):
                    schemas[name] = schema
                elif hasattr(schema, "model_json_schema"):
                    schemas[name] = schema.model_json_schema()
    return schemas


@dataclass(frozen=True)
class GraphWorkflow:
    """Bring your own graph: ``factory(checkpointer)`` returns it compiled over that saver."""

    name: str
    factory: Callable[[Any], Any]
    schemas: dict[str, dict] | None = None

    def build(self, checkpointer: Any, ledger: Ledger, receipts: Receipts) -> Any:
        graph = self.factory(checkpointer)
        if getattr(graph, "checkpointer", None) is not checkpointer:
            raise UserError(
                f"workflow {self.name!r}: the factory must compile the graph with the "
                "checkpointer it is given (create_agent(..., checkpointer=checkpointer))"
            )
        return graph

    def args_schemas(self, graph: Any) -> dict[str, dict]:
        return dict(self.schemas) if self.schemas is not None else tool_schemas(graph)

    def model_name(self) -> str:
        return f"the model of workflow {self.name!r}"

    def expires_in(self) -> float:
        return expires_in_setting(None)


def _amount(args: dict) -> object:
    return args["amount"]


def _order_total(args: dict) -> object:
    return args["quantity"] * args["unit_price"]


WORKFLOWS: dict[str, Workflow] = {
    "refund": AgentWorkflow(
        "refund",
        REFUND_TOOLS,
        Policy(
            (
                ApprovalRule(
                    "issue_refund",
                    _amount,
                    "REFUND_APPROVAL_THRESHOLD",
                    "20.00",
                    quorum_amount_setting="REFUND_QUORUM_AMOUNT",
                    quorum_setting="REFUND_QUORUM",
                ),
            ),
            expires_setting="REFUND_APPROVAL_EXPIRES_IN",
        ),
        REFUND_PROMPT,
        OfflineRefundModel,
    ),
    "purchase-order": AgentWorkflow(
        "purchase-order",
        PURCHASE_ORDER_TOOLS,
        Policy(
            (
                ApprovalRule(
                    "create_purchase_order",
                    _order_total,
                    "PURCHASE_ORDER_APPROVAL_THRESHOLD",
                    "100.00",
                    quorum_amount_setting="PURCHASE_ORDER_QUORUM_AMOUNT",
                    quorum_setting="PURCHASE_ORDER_QUORUM",
                ),
            ),
            expires_setting="PURCHASE_ORDER_APPROVAL_EXPIRES_IN",
        ),
        PURCHASE_ORDER_PROMPT,
        OfflinePurchaseOrderModel,
    ),
}


def register_workflow(
    name: str,
    workflow: Workflow | Callable[[Any], Any],
    *,
    args_schemas: dict[str, dict] | None = None,
) -> Workflow:
    """Make ``name`` startable in this process: a Workflow, or a graph factory taking the
    checkpointer. Other processes that resume the run must register it too; a
    ``module:factory`` name avoids that."""
    if not hasattr(workflow, "build"):
        workflow = GraphWorkflow(name, workflow, args_schemas)
    WORKFLOWS[name] = workflow
    return workflow


def _load(spec: str) -> Workflow:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"cannot load workflow {spec!r}: {exc}") from None
    target = getattr(module, attr, None)
    if target is None:
        raise UserError(f"cannot load workflow {spec!r}: {module_name} has no {attr!r}")
    if hasattr(target, "build"):
        return target
    if callable(target):
        return GraphWorkflow(spec, target)
    raise UserError(f"workflow {spec!r} is neither a Workflow nor a graph factory")


def get_workflow(name: str) -> Workflow:
    if name not in WORKFLOWS:
        if ":" in name and all(name.partition(":")[::2]):
            WORKFLOWS[name] = _load(name)
        else:
            raise UserError(
                f"unknown workflow {name!r}; choose one of: {', '.join(sorted(WORKFLOWS))}, "
                "or name a graph factory as package.module:function"
            )
    return WORKFLOWS[name]
