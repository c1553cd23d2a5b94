"""What one transition's notifications show (the actions in business terms, the last claim),
read at most once however many channels (webhooks, Slack, e-mail) show it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

from core.hitl import HitlRequest
from inbox.views import ActionView, as_decided, generic_view
from store.db import Tx
from store.run_reads import last_claim_in
from store.states import Run

log = logging.getLogger("ops.transitions")

# what a workflow's actions look like to people: ``Graphs.views`` in the worker
Views = Callable[[str, HitlRequest], Sequence[ActionView]]


def views_of(run: Run, views: Views | None) -> list[ActionView]:
    """The actions in business terms as decided (an edit's arguments once a decision is
    claimed, the proposal before); the generic view if the workflow's fails."""
    if run.request is None:
        return []
    request = as_decided(run.request, run.decision)
    if views is not None:
        try:
            return list(views(run.workflow, request))
        except Exception:  # noqa: BLE001 - a notification still goes out, in generic words
            log.warning("run %s: no business view for the notification", run.thread_id)
    return [generic_view(a) for a in request.actions]


class Shown:
    """One transition as its notifications show it; each part is read on first use."""

    def __init__(self, tx: Tx, run: Run, views: Views | None) -> None:
        self.tx, self.run, self._views = tx, run, views

    @cached_property
    def views(self) -> list[ActionView]:
        return views_of(self.run, self._views)

    @cached_property
    def claim(self) -> Any:
        """The run's last claim event (who decided), read in the transition's transaction."""
        return last_claim_in(self.tx, self.run.thread_id)
