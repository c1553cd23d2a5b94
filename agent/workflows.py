"""The demo workflows, ``refund`` and ``purchase-order``, as :class:`worker.workflows.Workflow`s.

Each is tools + policy + a system prompt, driven by Claude when ``ANTHROPIC_API_KEY`` is set and
by its deterministic offline model otherwise. :mod:`worker.workflows` finds them by name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from agent.graph import build_graph
from agent.ledger import Ledger
from agent.models import ChatModel, OfflinePurchaseOrderModel, OfflineRefundModel
from agent.policy import ApprovalRule, Policy, Standing
from agent.review import (
    check_purchase,
    check_refund,
    derive_purchase,
    describe_purchase,
    describe_refund,
    purchase_choices,
)
from agent.tools import (
    PURCHASE_ORDER_TOOLS,
    REFUND_TOOLS,
    CreatePurchaseOrderArgs,
    IssueRefundArgs,
    Tool,
    purchase_order_problem,
    refund_problem,
)
from core import settings
from core.hitl import ActionRequest, HitlRequest
from inbox.views import ActionView
from store.db import Store
from store.receipts import Receipts
from worker.authority import Charge
from worker.workflows import WorkflowBase

REFUND_PROMPT = """\
You handle refund requests for an online shop. Look every order up with lookup_order before \
refunding it, refund at most what it says is still refundable with issue_refund, and pass the \
customer's reason. \
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


def claude_configured() -> bool:
    return bool(settings.ANTHROPIC_API_KEY.get())


@dataclass(frozen=True)
class AgentWorkflow(WorkflowBase):
    """A built-in workflow on :func:`agent.graph.build_graph`."""

    name: str
    tools: tuple[Tool, ...]
    policy: Policy
    system_prompt: str
    offline: Callable[[], ChatModel]
    locked: tuple[tuple[str, tuple[str, ...]], ...] = ()  # tool -> arguments reviewers keep
    describer: Callable[[Ledger | None, ActionRequest], ActionView] | None = None
    checker: Callable[[Ledger | None, str, dict], None] | None = None
    # tool -> arguments that follow from others (read-only to reviewers), and how
    derived: tuple[tuple[str, tuple[str, ...]], ...] = ()
    deriver: Callable[[str, dict], dict] | None = None
    # tool -> argument -> the values a reviewer picks from, each with its name (a catalogue)
    chooser: Callable[[str], dict[str, list[tuple[str, str]]]] | None = None
    # the ledger of the store this copy was built over: what describe/check_edit read
    bound: dict[str, Ledger] = field(default_factory=dict, compare=False, repr=False)

    def __copy__(self) -> AgentWorkflow:
        """A copy with nothing bound yet: ``worker.graphs`` keeps one per store, and each binds
        its own store's ledger when it builds."""
        return replace(self, bound={})

    def model(self) -> ChatModel:
        if claude_configured():
            from agent.claude import ClaudeModel  # cheap: the SDK is imported on first call

            return ClaudeModel(self.system_prompt)
        return self.offline()

    def model_name(self) -> str:
        return self.model().name

    def build(self, store: Store) -> Any:
        ledger, receipts = Ledger(store.db), Receipts(store.db)
        self.bound["ledger"] = ledger
        return build_graph(
            self.model(), self.tools, self.policy, ledger, receipts, store.checkpointer
        )

    def args_schemas(self, graph: Any = None) -> dict[str, dict]:
        return {t.name: t.args_schema for t in self.tools}

    def quorum(self, request: HitlRequest) -> int:
        actions = request.actions
        return max([self.policy.quorum(a.name, a.args) for a in actions] or [1])

    def amount(self, request: HitlRequest) -> Decimal | None:
        """The largest amount among the proposed actions (the authority band it falls in);
        None when any action's amount cannot be read (the highest band then applies)."""
        amounts = [self.policy.amount(a.name, a.args) for a in request.actions]
        if not amounts or None in amounts:
            return None
        return max(a for a in amounts if a is not None)

    def charges(self, request: HitlRequest) -> list[Charge]:
        """Each action's amount and what it is counted on (the order refunded, the cost
        center charged): authority judges what one person approves for one of them in all."""
        return [
            Charge(self.policy.subject(a.name, a.args), self.policy.amount(a.name, a.args))
            for a in request.actions
        ]

    def expires_in(self) -> float:
        return self.policy.expires_in()

    def locked_arguments(self) -> dict[str, list[str]]:
        return {tool: list(args) for tool, args in self.locked}

    def describe(self, action: ActionRequest) -> ActionView:
        """The proposed call in business terms, for the page, notifications and chat."""
        from inbox.views import generic_view

        if self.describer is None:
            return generic_view(action, self.args_schemas().get(action.name))
        return self.describer(self.bound.get("ledger"), action)

    def reading_many(self) -> Any:
        """Around describing many requests at once (the queue page): ledger reads shared."""
        from agent.ledger import totals_remembered

        return totals_remembered()

    def derived_arguments(self) -> dict[str, list[str]]:
        """Tool name -> arguments that follow from others: shown, never typed."""
        return {tool: list(args) for tool, args in self.derived}

    def derive(self, tool: str, args: dict) -> dict:
        """An edited call with the arguments that follow from others re-derived."""
        return self.deriver(tool, args) if self.deriver is not None else args

    def argument_choices(self, tool: str) -> dict[str, list[tuple[str, str]]]:
        """Arguments picked from a list, never typed: (value, name) per option."""
        return self.chooser(tool) if self.chooser is not None else {}

    def check_edit(self, tool: str, args: dict) -> None:
        """Refuse (``UserError``) an edited call the business would not carry out."""
        if self.checker is not None:
            self.checker(self.bound.get("ledger"), tool, args)


def _amount(args: dict) -> object:
    return args["amount"]


def _order(args: dict) -> str:
    return f"order:{args['order_id']}"


def _cost_center(args: dict) -> str:
    return f"cost-center:{args['cost_center']}"


def _order_total(args: dict) -> object:
    return int(args["quantity"]) * Decimal(str(args["unit_price"]))


def refund_standing(ledger: Ledger, thread_id: str, args: dict) -> Standing:
    """Beyond what is left: refused. An order refunded before, or with another request open:
    always reviewed, and the reviewer is told ("A-1005 was refunded 199.99 on 2 Dec by run
    ...")."""
    try:
        refund = IssueRefundArgs.model_validate(args)
    except ValidationError:
        return Standing()  # the graph refuses malformed proposals itself
    problem = refund_problem(ledger, refund)
    if problem:
        return Standing(problem=problem)
    notes = []
    last = ledger.last_refund(refund.order_id)
    if last is not None:
        day = time.strftime("%-d %b", time.gmtime(last["created_at"]))
        notes.append(
            f"{refund.order_id} was refunded {ledger.refunded_total(refund.order_id):.2f} "
            f"so far, last on {day} by run {last['thread_id']}."
        )
    open_runs = ledger.open_refund_requests(refund.order_id, thread_id)
    if open_runs:
        notes.append(
            f"another request to refund {refund.order_id} waits for a reviewer "
            f"(run {', '.join(open_runs)})."
        )
    return Standing(note=" ".join(notes) or None)


def purchase_order_standing(ledger: Ledger, thread_id: str, args: dict) -> Standing:
    """An order beyond the cost center's remaining budget never reaches a reviewer."""
    try:
        order = CreatePurchaseOrderArgs.model_validate(args)
    except ValidationError:
        return Standing()
    return Standing(problem=purchase_order_problem(ledger, order))


REFUND = AgentWorkflow(
    "refund",
    REFUND_TOOLS,
    Policy(
        (
            ApprovalRule(
                "issue_refund",
                _amount,
                settings.REFUND_APPROVAL_THRESHOLD,
                settings.REFUND_QUORUM_AMOUNT,
                settings.REFUND_QUORUM,
                refund_standing,
                _order,
            ),
        ),
        expires=settings.REFUND_APPROVAL_EXPIRES_IN,
    ),
    REFUND_PROMPT,
    OfflineRefundModel,
    locked=(("issue_refund", ("order_id",)),),  # an edit may change the amount, not the order
    describer=describe_refund,
    checker=check_refund,
)

PURCHASE_ORDER = AgentWorkflow(
    "purchase-order",
    PURCHASE_ORDER_TOOLS,
    Policy(
        (
            ApprovalRule(
                "create_purchase_order",
                _order_total,
                settings.PURCHASE_ORDER_APPROVAL_THRESHOLD,
                settings.PURCHASE_ORDER_QUORUM_AMOUNT,
                settings.PURCHASE_ORDER_QUORUM,
                purchase_order_standing,
                _cost_center,
            ),
        ),
        expires=settings.PURCHASE_ORDER_APPROVAL_EXPIRES_IN,
    ),
    PURCHASE_ORDER_PROMPT,
    OfflinePurchaseOrderModel,
    # a reviewer changes how many, from whom and why; not what or for whom, nor the price
    locked=(("create_purchase_order", ("cost_center", "item")),),
    describer=describe_purchase,
    checker=check_purchase,
    derived=(("create_purchase_order", ("unit_price",)),),
    deriver=derive_purchase,
    chooser=purchase_choices,
)
