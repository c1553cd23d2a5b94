"""What every step of the worker shares: the store, the inbox, the runs, and each workflow's
compiled graph and edit schemas (built once per process)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from core import settings
from inbox import open_inbox
from inbox.base import Inbox
from ops.notify import on_transition
from store.approvals import RunApprovals
from store.db import Store
from store.receipts import Receipts
from store.runs import RunStore, lease_seconds
from worker.lease import Leases
from worker.workflows import Workflow, get_workflow


class Context:
    def __init__(
        self, store: Store, inbox: Inbox | None = None, clock: Callable[[], float] = time.time
    ):
        settings.check()  # a bad setting stops here, before any run is touched
        self.store = store
        self.clock = clock  # one notion of "now" for deadlines, in tests too
        self.runs = RunStore(store.db, clock, on_transition)  # notifications, metrics
        self.inbox = inbox if inbox is not None else open_inbox(store.db, clock)
        self.receipts = Receipts(store.db)
        self.approvals = RunApprovals(store.db, clock)
        self.leases = Leases(self.runs.renew, lambda: lease_seconds() / 3)
        self._graphs: dict[str, Any] = {}
        self._schemas: dict[str, dict] = {}

    def workflow(self, name: str) -> Workflow:
        return get_workflow(name)

    def graph(self, name: str) -> Any:
        """The workflow's compiled graph (built once per process)."""
        if name not in self._graphs:
            self._graphs[name] = self.workflow(name).build(self.store)
        return self._graphs[name]

    def args_schemas(self, name: str) -> dict[str, dict]:
        """Tool argument schemas that reviewers' edits must satisfy."""
        if name not in self._schemas:
            self._schemas[name] = self.workflow(name).args_schemas(self.graph(name))
        return self._schemas[name]
