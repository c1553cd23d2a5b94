"""Which graphs the worker can run, and the one interface a workflow offers it.

A :class:`Workflow` builds its graph over the store's checkpointer, names the argument schemas
reviewers' edits are checked against, and states its approval policy: how many distinct approvers
the proposed actions need and how long reviewers have. The demo workflows (``refund``,
``purchase-order``) live in :mod:`agent.workflows` and are found by name here; any other
LangGraph graph plugs in through a factory (:class:`GraphWorkflow`), registered in-process with
:func:`register_workflow` or named as ``package.module:factory``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from core import settings
from core.errors import UserError
from core.hitl import ActionRequest, HitlRequest
from inbox.views import ActionView, generic_view
from store.db import Store
from worker.authority import Charge
from worker.policy import default_window

log = logging.getLogger(__name__)

# The built-in workflows, by the name a run stores; imported on first use.
BUILTIN = {
    "refund": "agent.workflows:REFUND",
    "purchase-order": "agent.workflows:PURCHASE_ORDER",
}


@runtime_checkable
class Workflow(Protocol):
    """What the worker needs from a workflow: every member, so callers never probe for one.
    :class:`WorkflowBase` gives the optional ones their defaults; a workflow subclasses it and
    overrides what it offers."""

    @property
    def name(self) -> str: ...

    @property
    def asynchronous(self) -> bool:
        """Run through ``astream`` (an async-only chat model); async nodes are detected."""

    @property
    def resume_each(self) -> bool:
        """Several interrupts pending: resume as each is answered, not once all are."""

    def build(self, store: Store) -> Any:
        """The graph, compiled over ``store.checkpointer``; may check the workflow's settings."""

    def args_schemas(self, graph: Any) -> dict[str, dict[str, Any]]:
        """Tool name -> JSON schema of its arguments, for checking reviewers' edits."""

    def model_name(self) -> str: ...

    def quorum(self, request: HitlRequest) -> int:
        """Distinct approvers the request's proposed actions need (1 for most)."""

    def expires_in(self) -> float:
        """Seconds reviewers have to decide before the approval expires."""

    def locked_arguments(self) -> dict[str, list[str]]:
        """Tool name -> arguments a reviewer's edit may not change."""

    def describe(self, action: ActionRequest) -> ActionView | None:
        """What people read (page, notification); None: the generic rendering."""

    def check_edit(self, tool: str, args: dict[str, Any]) -> None:
        """Raise ``UserError``: the approved or edited call is refused by the business."""

    def derived_arguments(self) -> dict[str, list[str]]:
        """Tool -> arguments that follow from others (shown, never typed)."""

    def derive(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """An edit with the arguments that follow from others re-derived."""

    def argument_choices(self, tool: str) -> dict[str, list[tuple[str, str]]]:
        """Arguments picked from a list (a catalogue): arg -> [(value, name)]."""

    def amount(self, request: HitlRequest) -> Decimal | None:
        """The amount the authority band is chosen by; None: unknown (the highest band)."""

    def charges(self, request: HitlRequest) -> list[Charge]:
        """One charge per action: its amount and the business object it is counted on."""

    def reading_many(self) -> AbstractContextManager[object]:
        """Around describing many requests at once (the queue page): reads shared."""


class WorkflowBase:
    """The defaults of a :class:`Workflow`'s optional members, so a workflow offers only what
    it has and every caller calls every member (no ``getattr`` probe;
    ``tests/test_layout_typed.py`` keeps it so)."""

    asynchronous: bool = False
    resume_each: bool = False

    def describe(self, action: ActionRequest) -> ActionView | None:
        return None

    def check_edit(self, tool: str, args: dict[str, Any]) -> None:
        return None

    def derived_arguments(self) -> dict[str, list[str]]:
        return {}

    def derive(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return args

    def argument_choices(self, tool: str) -> dict[str, list[tuple[str, str]]]:
        return {}

    def amount(self, request: HitlRequest) -> Decimal | None:
        return None

    def charges(self, request: HitlRequest) -> list[Charge]:
        """Without subjects: the request's amount charged to each action on its own."""
        return [Charge(None, self.amount(request))] * len(request.actions)

    def reading_many(self) -> AbstractContextManager[object]:
        return nullcontext()


def view_of(
    flow: Workflow, action: ActionRequest, schemas: dict[str, dict[str, Any]]
) -> ActionView:
    """The action as the workflow describes it, or the generic rendering from its schema (also
    when the workflow's own description fails: a reviewer still sees what is proposed)."""
    try:
        view = flow.describe(action)
        if isinstance(view, ActionView):
            return view
    except Exception:  # a broken describe must not hide the request
        log.warning("workflow %s could not describe %s", flow.name, action.name, exc_info=True)
    return generic_view(action, schemas.get(action.name))


def tool_schemas(graph: Any) -> dict[str, dict[str, Any]]:
    """Argument schemas of the tools in a graph's ``ToolNode``s (what ``create_agent`` builds),
    so reviewers' edits are checked against them before the run resumes."""
    from worker.asyncgraph import tool_nodes

    schemas: dict[str, dict[str, Any]] = {}
    for tools in tool_nodes(graph):
        for name, tool in tools.tools_by_name.items():
            schema = tool.tool_call_schema
            if isinstance(schema, dict):
                schemas[name] = schema
            elif hasattr(schema, "model_json_schema"):
                schemas[name] = schema.model_json_schema()
    return schemas


@dataclass(frozen=True)
class GraphWorkflow(WorkflowBase):
    """Bring your own graph: ``factory(checkpointer)`` returns it compiled over that saver.
    One approver per request, the global approval window."""

    name: str
    factory: Callable[[Any], Any]
    schemas: dict[str, dict[str, Any]] | None = None
    # run through ``astream`` (an async-only chat model); async nodes and tools are detected
    asynchronous: bool = False
    # several interrupts pending: resume as each is answered (the unanswered nodes re-run up to
    # their ``interrupt()`` and pause again), not once all are; ``factory.resume_each = True``
    resume_each: bool = False

    def build(self, store: Store) -> Any:
        try:
            graph = self.factory(store.checkpointer)
        except (TypeError, ValueError, AttributeError) as exc:  # not a factory: ``os:getcwd``
            raise UserError(
                f"workflow {self.name!r}: the factory failed on the checkpointer it was given "
                f"({type(exc).__name__}); it must take one and return a compiled graph"
            ) from None
        if getattr(graph, "checkpointer", None) is not store.checkpointer:
            raise UserError(
                f"workflow {self.name!r}: the factory must compile the graph with the "
                "checkpointer it is given (create_agent(..., checkpointer=checkpointer))"
            )
        return graph

    def args_schemas(self, graph: Any) -> dict[str, dict[str, Any]]:
        return dict(self.schemas) if self.schemas is not None else tool_schemas(graph)

    def model_name(self) -> str:
        return f"the model of workflow {self.name!r}"

    def quorum(self, request: HitlRequest) -> int:
        return 1

    def expires_in(self) -> float:
        return default_window()

    def locked_arguments(self) -> dict[str, list[str]]:
        return {}


_REGISTERED: dict[str, Workflow] = {}


def register_workflow(
    name: str,
    workflow: Workflow | Callable[[Any], Any],
    *,
    args_schemas: dict[str, dict[str, Any]] | None = None,
    asynchronous: bool = False,
) -> Workflow:
    """Make ``name`` startable in this process: a Workflow, or a graph factory taking the
    checkpointer. Other processes that resume the run must register it too; a
    ``module:factory`` name avoids that."""
    flow: Workflow
    if isinstance(workflow, Workflow):
        flow = workflow
    elif callable(workflow):
        flow = GraphWorkflow(name, workflow, args_schemas, asynchronous)
    else:
        raise UserError(f"workflow {name!r} is neither a Workflow nor a graph factory")
    _REGISTERED[name] = flow
    return flow


def _load(spec: str) -> Workflow:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except (ImportError, TypeError, ValueError) as exc:  # ``.x`` is relative: TypeError
        raise UserError(f"cannot load workflow {spec!r}: {exc}") from None
    target = getattr(module, attr, None)
    if target is None:
        raise UserError(f"cannot load workflow {spec!r}: {module_name} has no {attr!r}")
    if isinstance(target, Workflow):
        return target
    if callable(target):  # ``factory.asynchronous = True`` marks an async-only model
        try:
            marks = vars(target)
        except TypeError:  # a builtin (``os:getcwd``) has no attributes: no marks
            marks = {}
        return GraphWorkflow(
            spec,
            target,
            asynchronous=bool(marks.get("asynchronous", False)),
            resume_each=bool(marks.get("resume_each", False)),
        )
    raise UserError(f"workflow {spec!r} is neither a Workflow nor a graph factory")


def names() -> list[str]:
    """Workflows this process knows by name (built in, registered, or imported so far)."""
    return sorted({*BUILTIN, *_REGISTERED})


def startable_over_http(name: str) -> bool:
    """Whether ``POST /runs`` may start ``name``: built in, registered in this process, or in
    ``API_WORKFLOWS``. Nothing else is imported on a request's say-so."""
    return name in BUILTIN or name in _REGISTERED or name in settings.API_WORKFLOWS.get()


def http_names() -> list[str]:
    return sorted(
        {*BUILTIN, *(n for n in _REGISTERED if ":" not in n)} | set(settings.API_WORKFLOWS.get())
    )


def get_workflow(name: str) -> Workflow:
    """The workflow a run names: registered, built in, or a ``module:factory`` to import."""
    if name not in _REGISTERED:
        if name in BUILTIN:
            _REGISTERED[name] = _load(BUILTIN[name])
        elif ":" in name and all(name.partition(":")[::2]):
            _REGISTERED[name] = _load(name)
        else:
            raise UserError(
                f"unknown workflow {name!r}; choose one of: {', '.join(names())}, "
                "or name a graph factory as package.module:function"
            )
    return _REGISTERED[name]
