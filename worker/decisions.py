"""The one decision path. Every source of decisions (the API, the web inbox, the inbox CLI, a
signed webhook, the sweep polling an inbox, and any channel added later) turns its input into a
:class:`Decision` and calls :meth:`Decisions.decide`. The decision, whole or partial, passes the
one rule pipeline (:mod:`worker.rules`: the deadline, the request named, valid decisions, the
workflow's checks, delegation, separation of duties, authority and the quorum needed); what
passes is applied here: a partial answer recorded, an approval counted toward the quorum (per
person, in the one approvals table), or the run claimed. It answers :class:`Applied` (the
claimed run, to resume), :class:`Pending` (approvals so far) or :class:`Refused` (a reason from
one enum). A refusal changes no table: it is logged, and the source says it in its own way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from core.errors import scrub
from core.faults import fault, shielded
from core.hitl import HitlRequest
from core.hitl_decisions import Decisions as Typed
from core.hitl_decisions import parse_stored
from inbox.duties import distinct
from ops import metrics
from store.answers import RunAnswers
from store.approvals import Approval, RunApprovals
from store.approved import record
from store.db import Tx
from store.runs import RunStore, Within, new_owner
from store.states import Run
from worker import delegation, traces
from worker.ballot import Applied, Decision, Pending, Result, Source
from worker.graphs import Graphs
from worker.refusals import Refusal, Refused
from worker.rules import Case, Pipeline, needs

log = logging.getLogger(__name__)

__all__ = ["Applied", "Decision", "Decisions", "Pending", "Result", "Source"]


class Decisions:
    def __init__(
        self,
        runs: RunStore,
        approvals: RunApprovals,
        graphs: Graphs,
        clock: Callable[[], float],
        answers: RunAnswers | None = None,
    ):
        self.runs = runs
        self.approvals = approvals
        self.answers = answers or runs.tables.answers(clock)
        self.graphs = graphs
        self.clock = clock
        self.rules = Pipeline(runs, self.answers, graphs, clock)

    def decide(
        self, decision: Decision, *, within: Within | None = None, run: Run | None = None
    ) -> Result:
        """Judge ``decision`` by the run's stored rules and apply it if it may be applied. An
        applied decision ends with its claim committed and queued for a resumer
        (``store.claimed``). ``within``: the source's own writes, committed with the claim if
        there is one (a webhook's delivery id); the source writes them itself for any other
        result. ``run``: the row the source read in this request to make ``decision`` (a
        page, a webhook reading answers by position), not read again: the claim's conditional
        ``UPDATE`` is what decides whether the run still waits on that request."""
        with traces.attempt(self, decision) as judged:
            result = self._decide(decision, within, run)
            # what was claimed stands, and is handed off, whatever its count, span and log do
            shielded("decide.claimed", lambda: (judged(result), self._tell(decision, result)))
        return result

    @staticmethod
    def _tell(decision: Decision, result: Result) -> None:
        metrics.count_claim(result)
        if isinstance(result, Refused):
            log.info(
                "decision on %s through %s by %s refused (%s): %s",
                decision.thread_id,
                decision.source,
                ", ".join(decision.approvers) or "nobody named",
                result.reason,
                scrub(result.message),
            )

    def _decide(self, decision: Decision, within: Within | None, run: Run | None) -> Result:
        if run is None or run.thread_id != decision.thread_id:
            run = self.runs.get(decision.thread_id)
        case = self.rules.judge(run, decision)
        if isinstance(case, Refused):
            return case
        if case.partial:
            return self._partial(case, within)
        d, run = case.decision, case.run
        typed = Typed(tuple(case.given[i] for i in sorted(case.given)))
        approvers = case.approvers
        if typed.approving:
            so_far = self.approvals.list(run.thread_id, d.interrupt_id)
            other = next((a for a in so_far if a.decisions != typed.to_json()), None)
            if other is not None and not d.counter:
                return Refused(
                    Refusal.DISAGREE,
                    f"{other.reviewer} approved other decisions; approvers of a quorum "
                    "must agree (or one of you rejects, or makes a counter-proposal)",
                )
            restart = other is not None
            if case.needed > 1:
                counted = self._count(case, typed.to_json(), [] if restart else so_far, restart)
                if not isinstance(counted, list):
                    return counted
                approvers = counted
        return self._claim(case, typed.resume_value(), typed.to_json(), approvers, within)

    def needs(self, run: Run, request: HitlRequest | None = None) -> str | None:
        """Who may approve the request a run waits on (or ``request``, an edit of it), as
        shown to reviewers (``one of finance``); None when any one reviewer may."""
        return needs(self.rules, run, request)

    def _claim(
        self,
        case: Case,
        resume: dict[str, Any],
        decided: list[Any],
        approvers: list[str],
        within: Within | None,
    ) -> Applied | Refused:
        d = case.decision
        claimed = self.runs.claim(
            d.thread_id,
            d.interrupt_id,
            resume,
            new_owner(str(d.source)),
            decided=decided,
            approvers=approvers,
            source=str(d.source),
            within=_both(within, self._approved(case)),
        )
        if claimed is None:  # someone else's claim, or the deadline, came first
            lost = self.rules.still_waiting(self.runs.get(d.thread_id), d)
            return lost or Refused(Refusal.DECIDED, "another decision was applied first")
        return Applied(claimed, approvers)

    def _approved(self, case: Case) -> Within | None:
        """What the decision approves, recorded with whatever makes it binding."""
        if not case.approved:
            return None
        return lambda tx: record(tx, case.approved, self.clock())

    def _partial(self, case: Case, within: Within | None = None) -> Result:
        """Answers to some of a pause's actions (several interrupts, answered by different
        people at different times), judged by every rule like a whole decision. Each is
        recorded in ``run_answers``; the run is claimed with all of them once the last arrives,
        or at once where the workflow resumes as each is answered (``resume_each``: LangGraph
        re-runs the unanswered nodes up to their ``interrupt()``, which pause again). An
        answered action is never answered again."""
        run, d, given, approvers = case.run, case.decision, case.given, case.approvers
        merged = case.merged
        total = len(case.request.actions)
        resume_each = self.graphs.workflow(run.workflow).resume_each
        recorded = len(merged) < total and not resume_each
        if recorded:
            decided = {i: x.to_json() for i, x in given.items()}
            by = ", ".join(approvers) or "nobody named"
            source = str(d.source)
            if not self.answers.add(
                run.thread_id,
                d.interrupt_id,
                decided,
                by,
                source=source,
                total=total,
                within=self._approved(case),
            ):
                return Refused(Refusal.DECIDED, "another answer to that action came first")
            fault("answer.recorded")
            # read after the commit: of two last answers, whoever commits second sees both
            stored = self.answers.list(run.thread_id, d.interrupt_id)
            everyone = distinct(a.reviewer for a in stored.values())
            if len(stored) < total:
                return Pending(everyone, 1, len(stored), total)
            merged = {i: parse_stored(a.decision) for i, a in stored.items()}
            case = replace(case, approved=())  # recorded with the answer
        else:
            everyone = distinct([*(a.reviewer for a in case.stored.values()), *approvers])
        decisions = [merged[i].to_json() if i in merged else None for i in range(total)]
        applied = self._claim(case, {"decisions": decisions}, decisions, everyone, within)
        if isinstance(applied, Refused) and recorded:
            return Pending(everyone, 1, total, total)  # the other last answer claimed it, with this
        return applied

    def _count(
        self,
        case: Case,
        decisions: list[dict[str, Any]],
        so_far: list[Approval],
        restart: bool = False,
    ) -> list[str] | Pending | Refused:
        """Count these approvers toward the quorum (``so_far`` agree with them): everyone when
        it is met, else the approvals so far (or why they cannot count). A quorum counts
        distinct principals and distinct people: ``bob for alice`` is alice's approval, and
        bob's too (neither alice nor bob counts again)."""
        run, d, approvers, needed = case.run, case.decision, case.approvers, case.needed
        known = set().union(*(a.people for a in so_far))
        keyed = delegation.keys(approvers, case.acting)
        new = {keyed[n][0]: n for n in approvers if not set(keyed[n]) & known}
        if not new:
            named = set().union(*(set(keyed[n]) for n in approvers))
            already = [a.reviewer for a in so_far if a.people & named] or ["nobody named"]
            return Refused(
                Refusal.REPEATED,
                f"{', '.join(already)} already approved; the request needs {needed} "
                "distinct approvers",
            )
        counted = [a for a in case.approved if a.principal_key in new]
        rows = self.approvals.add(
            run.thread_id,
            d.interrupt_id,
            new,
            decisions,
            source=str(d.source),
            quorum=needed,
            restart=restart,
            actors={keyed[n][0]: keyed[n][1] for n in new.values()},
            within=self._approved(replace(case, approved=tuple(counted))),
        )
        everyone = distinct(a.reviewer for a in rows)
        if len(everyone) < needed:
            return Pending(everyone, needed)
        return everyone


def _both(*steps: Within | None) -> Within:
    """The writes of several callers, in one transaction, in order."""

    def run(tx: Tx) -> None:
        for step in steps:
            if step is not None:
                step(tx)

    return run
