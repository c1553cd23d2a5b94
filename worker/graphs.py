"""Each workflow's compiled graph and edit schemas, built once per process (compiling a graph
and reading its tools' schemas costs more than a resume)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from decimal import Decimal
from typing import Any

from core import coldstart
from core.hitl import HitlRequest
from inbox.views import ActionView
from store.db import Store
from worker import authority
from worker.workflows import Workflow, get_workflow, view_of


class Graphs:
    def __init__(self, store: Store):
        self.store = store
        self._graphs: dict[str, Any] = {}
        self._schemas: dict[str, dict[str, Any]] = {}
        self._flows: dict[str, Workflow] = {}

    def workflow(self, name: str) -> Workflow:
        """The workflow as this store's runs use it: a copy per store, so what a workflow keeps
        from ``build`` (the demo's ledger) is this store's, never another store's of the same
        process (a pool one of them has closed, or another database)."""
        if name not in self._flows:
            self._flows[name] = copy.copy(get_workflow(name))
        return self._flows[name]

    def graph(self, name: str) -> Any:
        """The workflow's compiled graph (built once per process)."""
        if name not in self._graphs:
            self._graphs[name] = self.workflow(name).build(self.store)
            coldstart.over()  # a run's start-up ends with its graph built
        return self._graphs[name]

    def args_schemas(self, name: str) -> dict[str, dict[str, Any]]:
        """Tool argument schemas that reviewers' edits must satisfy."""
        if name not in self._schemas:
            self._schemas[name] = self.workflow(name).args_schemas(self.graph(name))
        return self._schemas[name]

    def amount(self, name: str, request: HitlRequest) -> Decimal | None:
        """The amount the request's authority band is read from (who is mailed it), as the
        decision path and ``approval.needs`` read it; None: unknown."""
        return authority.request_amount(self.workflow(name), request)

    def views(self, name: str, request: HitlRequest) -> list[ActionView]:
        """Each proposed action as people read it (the workflow's ``describe``, or generic)."""
        schemas = self.args_schemas(name)  # builds the graph: ``describe`` may read its ledger
        flow = self.workflow(name)
        return [view_of(flow, a, schemas) for a in request.actions]

    @contextmanager
    def reading_many(self, names: set[str]) -> Iterator[None]:
        """Around describing many requests of these workflows at once: each workflow that
        offers ``reading_many()`` shares its reads across them (one per order, not per row)."""
        with ExitStack() as stack:
            for name in sorted(names):
                try:
                    flow = self.workflow(name)
                except Exception:  # noqa: BLE001 - an unknown workflow: described generically
                    continue
                stack.enter_context(flow.reading_many())
            yield
