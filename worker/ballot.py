"""What the one decision path takes and gives: the typed :class:`Decision` a source builds
(who, which request and the digest they saw, one decision per action) and the three results
:meth:`worker.decisions.Decisions.decide` answers: :class:`Applied`, :class:`Pending` or a
``Refused``. Kept apart from the path so each source imports the contract, not the rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.errors import UserError
from core.hitl_decisions import Verdict, read_answers
from core.identity import Provenance
from store.states import Run
from worker.refusals import Refused


class Source(StrEnum):
    """Where a decision came from; recorded with its approvals and its claim."""

    API = "api"
    PAGE = "page"
    CLI = "inbox"
    WEBHOOK = "webhook"
    SWEEP = "sweep"
    SLACK = "slack"
    EMAIL = "email"
    LANGGRAPH = "langgraph"

    @property
    def label(self) -> str:
        return _LABELS[self]

    @staticmethod
    def label_of(value: object) -> str | None:
        """The label of a source stored as text (None for one this release does not know)."""
        return _LABELS.get(Source(value)) if value in _SOURCES else None


_LABELS = {
    Source.API: "the API",
    Source.PAGE: "the web inbox",
    Source.CLI: "the inbox command line",
    Source.WEBHOOK: "a signed webhook",
    Source.SWEEP: "the inbox, by polling",
    Source.SLACK: "Slack",
    Source.EMAIL: "an e-mail link",
    Source.LANGGRAPH: "a LangGraph client",
}


@dataclass(frozen=True)
class Decision:
    """Who decided which request, and how: one decision per proposed action, in order.

    ``digest`` is what the reviewer saw (``GET /runs/{id}``'s ``approval.digest``); a source
    that shows no request of its own (a webhook, a poll, the CLI reading the request by its id)
    leaves it None and the interrupt id alone names the request.

    ``groups``: each approver's groups, by name, from a source that authenticated them (the
    API, the web inbox); None from a source that only names people (the CLI, a webhook, a
    poll): the path then looks them up by name (``worker.authority``)."""

    thread_id: str
    interrupt_id: str
    # one per action, typed where the source received them (:meth:`read` for the wire's
    # shape); ``None`` leaves an action unanswered (one of several interrupts of a pause,
    # answered ahead of the others)
    decisions: Sequence[Verdict | None]
    approvers: list[str]
    source: Source
    digest: str | None = None
    # a counter-proposal: decisions that differ from the quorum's so far replace them and the
    # count restarts with these approvers (otherwise a disagreeing approval is refused)
    counter: bool = False
    groups: Mapping[str, frozenset[str]] | None = None
    # the person the (one) approver acts for under a delegation to them (``worker.delegation``):
    # named by the source explicitly, never guessed; None: they act as themselves
    on_behalf_of: str | None = None
    # the kind of credential that vouched for the approver, from a source that takes more
    # than one (the API and LangGraph clients: an API key or a JWT); None: the source's own
    provenance: Provenance | None = None
    # what :meth:`read` could not read as decisions (why, in today's words): the rule
    # pipeline refuses it in its turn, so a halt or a stale digest is still said first
    unreadable: str | None = None

    @classmethod
    def read(cls, raw: Any, **fields: Any) -> Decision:
        """A decision from a source that received the wire's ``{"decisions": [...]}`` (or
        its list): read once, here."""
        try:
            return cls(decisions=read_answers(raw), **fields)
        except UserError as exc:
            return cls(decisions=(), unreadable=str(exc), **fields)


@dataclass(frozen=True)
class Applied:
    """The decision claimed the run, which is now ``resuming`` and queued for a resumer
    (``store.claimed``); a source without one (serverless) takes and resumes it inline."""

    run: Run
    approvers: list[str] = field(default_factory=list)  # everyone whose approval it took


@dataclass(frozen=True)
class Pending:
    """An approval counted toward a quorum that is not met yet; the run still waits."""

    approvers: list[str] = field(default_factory=list)
    quorum: int = 1
    answered: int = 0  # several interrupts pending: how many of them have their answer
    questions: int = 0  # ... of how many (0: a quorum, not partial answers)

    def answer(self, thread_id: str) -> dict[str, Any]:
        """The one JSON answer every source gives a pending decision (API, webhook, Slack,
        e-mail link; ``api.models.ApprovalRecorded``): the approvals so far of the quorum, and
        for a pause answered in parts, how many of its questions have their answer."""
        body: dict[str, Any] = {
            "status": "approval recorded",
            "thread_id": thread_id,
            "approvers": list(self.approvers),
            "quorum": self.quorum,
        }
        if self.questions:
            body.update(answered=self.answered, questions=self.questions)
        return body


Result = Applied | Pending | Refused


_SOURCES = {str(s) for s in Source}
