"""The one decision path. Every source of decisions (the API, the web inbox, the inbox CLI, a
signed webhook, the sweep polling an inbox, and any channel added later) turns its input into a
:class:`Decision` and calls :meth:`Decisions.decide`, which alone applies the rules fixed on the
run when it paused: the deadline, the request named (interrupt id and digest), valid decisions
(schema, allowed types, locked arguments, the workflow's check of edits), separation of duties
and the quorum, counted per person in the one approvals table. It answers :class:`Applied` (the
claimed run, to resume), :class:`Pending` (approvals so far) or :class:`Refused` (a reason from
one enum). A refusal changes no table: it is logged, and the source says it in its own way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from core.errors import UserError, scrub
from core.faults import fault
from core.limits import check_name
from inbox.duties import SelfApproval, check_duties, distinct
from inbox.hitl import ActionDecision, HitlRequest, validate_answers
from inbox.hitl import Decisions as Typed
from ops import metrics
from store.answers import Answer, RunAnswers
from store.approvals import Approval, RunApprovals
from store.delegations import Delegations
from store.keys import KeyStore
from store.runs import RunStore, Within, new_owner
from store.states import Run, Status
from worker import authority, delegation, traces
from worker.ballot import Applied, Decision, Pending, Result, Source
from worker.graphs import Graphs
from worker.refusals import Refusal, Refused, unknown_run

log = logging.getLogger(__name__)


def _stamp(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at or 0))


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
        self.answers = answers or RunAnswers(runs.db, clock)
        self.graphs = graphs
        self.clock = clock
        self.keys = KeyStore(runs.db)
        self.delegations = Delegations(runs.db, clock)

    def decide(
        self, decision: Decision, *, handoff: bool = False, within: Within | None = None
    ) -> Result:
        """Judge ``decision`` by the run's stored rules and apply it if it may be applied.

        ``handoff``: the source does not resume the run itself (the inbox CLI); the claim is
        left for the next sweep or signed delivery to take up (``RunStore.claim``).
        ``within``: the source's own writes, committed with the claim if there is one (a
        webhook's delivery id); the source writes them itself for any other result."""
        with traces.attempt(self, decision) as judged:
            result = self._decide(decision, handoff, within)
            judged(result)
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
        return result

    def _decide(self, d: Decision, handoff: bool, within: Within | None) -> Result:
        run = self.runs.get(d.thread_id)
        refused = self._still_waiting(run, d)
        if refused is not None:
            return refused
        assert run is not None and run.request is not None  # a waiting run has its request
        if d.digest is not None and d.digest != run.request_digest:
            return Refused(
                Refusal.STALE,
                "the request changed since it was read (or the digest is wrong): read the run "
                "again and decide on what it proposes now",
            )
        request = HitlRequest.parse(run.request)
        try:
            schemas = self.graphs.args_schemas(run.workflow)
            given = validate_answers(request, d.resume_value(), schemas)
            self._check_edits(run.workflow, request, given)
            for name in d.approvers:  # one person each, told apart by visible characters
                check_name(name, "an approver's name")
        except UserError as exc:
            return Refused(Refusal.INVALID, f"invalid decision: {exc}")
        approving = Typed(tuple(given.values())).approving
        resolved = delegation.resolve(d, run, approving, self.delegations, self.clock())
        if isinstance(resolved, Refused):
            return resolved
        d, acting = resolved  # a delegate: "bob for alice", holding what alice lent
        # only a pause with several actions is ever answered in part (``_partial``)
        several = len(request.actions) > 1
        stored = self.answers.list(run.thread_id, d.interrupt_id) if several else {}
        if stored or len(given) < len(request.actions):
            return self._partial(run, d, request, given, stored, handoff, within)
        typed = Typed(tuple(given[i] for i in sorted(given)))
        approvers = distinct(d.approvers)
        if typed.approving:
            try:
                check_duties(approvers, run.requested_by, run.separation, f"run {run.thread_id}")
            except SelfApproval as exc:
                return Refused(Refusal.DUTIES, str(exc))
            edited = _edited(request, given)
            needed = max(run.quorum or 1, self._quorum(run.workflow, edited))
            if run.authority is not None:  # the band of the request as it will run
                amount = authority.amount_of(self.graphs.workflow(run.workflow), edited)
                band = authority.check(
                    run.authority, amount, approvers, d.groups, self.keys.groups_of
                )
                if isinstance(band, Refused):
                    return band
                needed = max(needed, band.quorum)
            so_far = self.approvals.list(run.thread_id, d.interrupt_id)
            other = next((a for a in so_far if a.decisions != typed.to_json()), None)
            if other is not None and not d.counter:
                return Refused(
                    Refusal.DISAGREE,
                    f"{other.reviewer} approved other decisions; approvers of a quorum "
                    "must agree (or one of you rejects, or makes a counter-proposal)",
                )
            restart = other is not None
            if needed > 1:
                counted = self._count(
                    run,
                    d,
                    typed.to_json(),
                    approvers,
                    needed,
                    [] if restart else so_far,
                    acting,
                    restart,
                )
                if not isinstance(counted, list):
                    return counted
                approvers = counted
        claimed = self.runs.claim(
            run.thread_id,
            d.interrupt_id,
            typed.resume_value(),
            new_owner(str(d.source)),
            decided=typed.to_json(),
            approvers=approvers,
            source=str(d.source),
            handoff=handoff,
            within=within,
        )
        if claimed is None:  # someone else's claim, or the deadline, came first
            current = self.runs.get(d.thread_id)
            lost = self._still_waiting(current, d)
            return lost or Refused(Refusal.DECIDED, "another decision was applied first")
        return Applied(claimed, approvers)

    def needs(self, run: Run) -> str | None:
        """Who may approve the request a run waits on, as shown to reviewers (``one of
        finance``); None when no authority matrix applies to it."""
        if run.authority is None or run.request is None:
            return None
        flow = self.graphs.workflow(run.workflow)
        amount = authority.amount_of(flow, HitlRequest.parse(run.request))
        return authority.needs(run.authority, amount)

    def _still_waiting(self, run: Run | None, d: Decision) -> Refused | None:
        """Why the run does not wait for this decision (None if it does)."""
        if run is None:
            return unknown_run(d.thread_id)
        named = f"request {d.interrupt_id}"
        if run.status == Status.WAITING:
            if run.interrupt_id != d.interrupt_id:
                return Refused(Refusal.OTHER_INTERRUPT, "run is waiting on a different interrupt")
            if run.expires_at is not None and run.expires_at <= self.clock():
                return self._expired(named, run)
            return None
        if run.interrupt_id == d.interrupt_id:
            if run.status == Status.EXPIRED:
                return self._expired(named, run)
            if run.status == Status.CANCELLED:
                return Refused(Refusal.NOT_WAITING, f"{named} was cancelled; it cannot be decided")
            claim = self.runs.last_claim(run.thread_id)
            detail = (claim or {}).get("detail") or {}
            if claim is not None and detail.get("interrupt_id") == d.interrupt_id:
                return Refused(Refusal.DECIDED, _decided(named, claim, detail))
        return Refused(Refusal.NOT_WAITING, f"run is {run.status}, not waiting")

    def _expired(self, named: str, run: Run) -> Refused:
        return Refused(
            Refusal.EXPIRED,
            f"{named} expired at {_stamp(run.expires_at)}; a decision is no longer accepted "
            "(start a new run if the action is still wanted)",
        )

    def _check_edits(
        self, workflow: str, request: HitlRequest, given: dict[int, ActionDecision]
    ) -> None:
        """The workflow's own judgement of edited arguments (what is still refundable, the
        budget left), if it offers one: ``check_edit(tool, args)`` raising ``UserError``."""
        check = getattr(self.graphs.workflow(workflow), "check_edit", None)
        if check is None:
            return
        for i, decision in sorted(given.items()):
            before = request.actions[i]
            if decision.type == "edit" and (decision.args or {}) != before.args:
                check(before.name, decision.args or {})

    def _partial(
        self,
        run: Run,
        d: Decision,
        request: HitlRequest,
        given: dict[int, ActionDecision],
        stored: dict[int, Answer],
        handoff: bool,
        within: Within | None = None,
    ) -> Result:
        """Answers to some of a pause's actions (several interrupts, answered by different
        people at different times). Each is recorded in ``run_answers``; the run is claimed
        with all of them once the last arrives, or at once where the workflow resumes as each
        is answered (``resume_each``: LangGraph re-runs the unanswered nodes up to their
        ``interrupt()``, which pause again). An answered action is never answered again."""
        if not given:
            return Refused(Refusal.INVALID, "invalid decision: every decision is null")
        taken = [stored[i] for i in sorted(given) if i in stored]
        if taken:
            first = taken[0]
            through = Source.label_of(first.source) or first.source
            return Refused(
                Refusal.DECIDED,
                f"action {first.position + 1} of request {d.interrupt_id} was already answered "
                f"(through {through}, by {first.reviewer} at {_stamp(first.at)}); an answer "
                "is not asked again",
            )
        approvers = distinct(d.approvers)
        if Typed(tuple(given.values())).approving:
            try:
                check_duties(approvers, run.requested_by, run.separation, f"run {run.thread_id}")
            except SelfApproval as exc:
                return Refused(Refusal.DUTIES, str(exc))
        merged = {i: ActionDecision.parse(a.decision) for i, a in stored.items()} | given
        needed = max(run.quorum or 1, self._quorum(run.workflow, _edited(request, merged)))
        if needed > 1:
            return Refused(
                Refusal.INVALID,
                f"invalid decision: this request needs {needed} approvers, so every action is "
                "decided at once (no null)",
            )
        total = len(request.actions)
        resume_each = bool(getattr(self.graphs.workflow(run.workflow), "resume_each", False))
        recorded = len(merged) < total and not resume_each
        if recorded:
            decided = {i: x.to_json() for i, x in given.items()}
            by = ", ".join(approvers) or "nobody named"
            source = str(d.source)
            if not self.answers.add(
                run.thread_id, d.interrupt_id, decided, by, source=source, total=total
            ):
                return Refused(Refusal.DECIDED, "another answer to that action came first")
            fault("answer.recorded")
            # read after the commit: of two last answers, whoever commits second sees both
            stored = self.answers.list(run.thread_id, d.interrupt_id)
            everyone = distinct(a.reviewer for a in stored.values())
            if len(stored) < total:
                return Pending(everyone, 1, len(stored), total)
            merged = {i: ActionDecision.parse(a.decision) for i, a in stored.items()}
        else:
            everyone = distinct([*(a.reviewer for a in stored.values()), *approvers])
        decisions = [merged[i].to_json() if i in merged else None for i in range(total)]
        claimed = self.runs.claim(
            run.thread_id,
            d.interrupt_id,
            {"decisions": decisions},
            new_owner(str(d.source)),
            decided=decisions,
            approvers=everyone,
            source=str(d.source),
            handoff=handoff,
            within=within,
        )
        if claimed is not None:
            return Applied(claimed, everyone)
        if recorded:  # the other last answer claimed it, with this one
            return Pending(everyone, 1, total, total)
        lost = self._still_waiting(self.runs.get(d.thread_id), d)
        return lost or Refused(Refusal.DECIDED, "another decision was applied first")

    def _quorum(self, workflow: str, edited: HitlRequest) -> int:
        """Distinct approvers the request as it will run needs: an edit may raise an amount
        past the quorum amount (the policy judged again)."""
        return self.graphs.workflow(workflow).quorum(edited)

    def _count(
        self,
        run: Run,
        d: Decision,
        decisions: list[dict[str, Any]],
        approvers: list[str],
        needed: int,
        so_far: list[Approval],
        acting: delegation.Acting | None,
        restart: bool = False,
    ) -> list[str] | Pending | Refused:
        """Count these approvers toward the quorum (``so_far`` agree with them): everyone when
        it is met, else the approvals so far (or why they cannot count). A quorum counts
        distinct principals and distinct people: ``bob for alice`` is alice's approval, and
        bob's too (neither alice nor bob counts again)."""
        known = set().union(*(a.people for a in so_far))
        keyed = delegation.keys(approvers, acting)
        new = {keyed[n][0]: n for n in approvers if not set(keyed[n]) & known}
        if not new:
            named = set().union(*(set(keyed[n]) for n in approvers))
            already = [a.reviewer for a in so_far if a.people & named] or ["nobody named"]
            return Refused(
                Refusal.REPEATED,
                f"{', '.join(already)} already approved; the request needs {needed} "
                "distinct approvers",
            )
        rows = self.approvals.add(
            run.thread_id,
            d.interrupt_id,
            new,
            decisions,
            source=str(d.source),
            quorum=needed,
            restart=restart,
            actors={keyed[n][0]: keyed[n][1] for n in new.values()},
        )
        everyone = distinct(a.reviewer for a in rows)
        if len(everyone) < needed:
            return Pending(everyone, needed)
        return everyone


def _edited(request: HitlRequest, given: dict[int, ActionDecision]) -> HitlRequest:
    """The request as it will run: each edit's arguments (the policy judges it again, since
    an edit may raise an amount past the quorum amount)."""
    return request.edited(
        [given.get(i) or ActionDecision("approve") for i in range(len(request.actions))]
    )


def _decided(named: str, claim: dict[str, Any], detail: dict[str, Any]) -> str:
    label = Source.label_of(detail.get("source"))
    through = f"through {label}, " if label else ""
    who = ", ".join(detail.get("approvers") or []) or "another reviewer"
    return (
        f"{named} was already decided ({through}by {who} at {_stamp(claim['at'])}); "
        "a decision cannot be changed"
    )
