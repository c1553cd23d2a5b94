"""The one rule pipeline: every decision, whole or partial (some actions of a pause answered
ahead of the others), from every source, passes the same ordered rules before anything is
written. The order is written once, in :data:`PIPELINE`; each rule is a small function of the
:class:`Case` so far that returns the case (perhaps refined: the typed answers, the delegate's
principal, the quorum needed) or a :class:`Refused`. :mod:`worker.decisions` then applies what
passed: records a partial answer, counts an approval toward a quorum, or claims the run.

A rule added here holds on every channel and for partial answers alike, which is the point: the
authority matrix once skipped answers given in parts because it lived in the whole path only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal

from core.errors import UserError
from core.hitl import HitlRequest
from core.hitl_decisions import Approve, Edit, Verdict, check_answers, parse_stored
from core.limits import check_name
from core.moments import iso_utc, moment
from inbox.duties import SelfApproval, check_duties, distinct
from store.answers import Answer, RunAnswers
from store.approved import Approved
from store.event_rows import AuditEvent
from store.runs import RunStore
from store.states import Run, Status
from worker import authority, delegation
from worker.ballot import Decision, Source
from worker.graphs import Graphs
from worker.refusals import Refusal, Refused, halted, unknown_run


@dataclass(frozen=True)
class Case:
    """A decision as the rules have judged it so far."""

    run: Run
    decision: Decision
    request: HitlRequest = field(default_factory=lambda: HitlRequest.parse({}))
    given: dict[int, Verdict] = field(default_factory=dict)  # this decision's, by position
    stored: dict[int, Answer] = field(default_factory=dict)  # earlier answers to this pause
    acting: delegation.Acting | None = None  # a delegate acting for someone
    approvers: list[str] = field(default_factory=list)  # distinct, as judged
    needed: int = 1  # distinct approvers the request as it will run needs
    approved: tuple[Approved, ...] = ()  # what this decision approves, per principal and object

    @property
    def partial(self) -> bool:
        return bool(self.stored) or len(self.given) < len(self.request.actions)

    @property
    def merged(self) -> dict[int, Verdict]:
        """Every answer of the pause so far, this decision's included."""
        return {i: parse_stored(a.decision) for i, a in self.stored.items()} | self.given

    @property
    def approving(self) -> bool:
        return any(x.approving for x in self.given.values())


class Pipeline:
    """The rules in order (:data:`PIPELINE`) and what they read: the run's history, the
    answers so far, the directory, delegations and what each person approved before."""

    def __init__(
        self, runs: RunStore, answers: RunAnswers, graphs: Graphs, clock: Callable[[], float]
    ):
        self.runs = runs
        self.answers = answers
        self.graphs = graphs
        self.clock = clock
        tables = runs.tables
        self.keys = tables.keys()
        self.delegations = tables.delegations(clock)
        self.amounts = tables.approved_amounts()
        self.halts = tables.halts()

    def judge(self, run: Run | None, d: Decision) -> Case | Refused:
        """The decision through every rule, in order: the case to apply, or the first refusal."""
        refused = self.still_waiting(run, d)
        if refused is not None:
            return refused
        assert run is not None
        case = Case(run, d)
        for rule in PIPELINE:
            judged = rule(self, case)
            if isinstance(judged, Refused):
                return judged
            case = judged
        return case

    def still_waiting(self, run: Run | None, d: Decision) -> Refused | None:
        """The deadline and the run's state: why the run does not wait for this decision (None
        if it does). Also asked after a lost claim, to say who won."""
        if run is None:
            return unknown_run(d.thread_id)
        named = {"run": run.thread_id, "request": d.interrupt_id}
        if run.status == Status.WAITING:
            if run.interrupt_id != d.interrupt_id:
                said = "the run now waits on another request: read it again"
                return Refused(Refusal.OTHER_INTERRUPT, said, named)
            if run.expires_at is not None and run.expires_at <= self.clock():
                return _expired(named, run)
            return None
        if run.interrupt_id == d.interrupt_id:
            if run.status == Status.EXPIRED:
                return _expired(named, run)
            if run.status == Status.CANCELLED:
                said = "this request was cancelled; it cannot be decided"
                return Refused(Refusal.NOT_WAITING, said, named)
            claim = self.runs.last_claim(run.thread_id)
            if claim is not None and claim.facts.get("interrupt_id") == d.interrupt_id:
                return _decided(named, claim)
        state = _STATE_WORDS.get(run.status, "no longer waiting")
        return Refused(Refusal.NOT_WAITING, f"nothing waits for a decision here: {state}", named)


Rule = Callable[[Pipeline, Case], "Case | Refused"]


def not_halted(r: Pipeline, c: Case) -> Case | Refused:
    """The stop button: nothing is decided while a halt holds the workflow or a tool it asks."""
    tools = [a.name for a in c.run.asked.actions]
    stop = r.halts.holding(c.run.workflow, tools)
    return halted(stop) if stop is not None else c


def request_and_digest(r: Pipeline, c: Case) -> Case | Refused:
    """The decision names the request the run waits on, as the reviewer saw it."""
    if c.decision.digest is not None and c.decision.digest != c.run.request_digest:
        return Refused(
            Refusal.STALE,
            "the request changed since it was read (or the digest is wrong): read the run "
            "again and decide on what it proposes now",
        )
    return replace(c, request=c.run.asked)


def typed_answers(r: Pipeline, c: Case) -> Case | Refused:
    """One valid decision per answered action (schema, allowed types, locked arguments), named
    approvers, and no action answered twice (a pause with several actions is answered in part)."""
    try:
        if c.decision.unreadable is not None:
            raise UserError(c.decision.unreadable)
        schemas = r.graphs.args_schemas(c.run.workflow)
        given = check_answers(c.request, c.decision.decisions, schemas)
        for name in c.decision.approvers:  # one person each, told apart by visible characters
            check_name(name, "an approver's name")
    except UserError as exc:
        return Refused(Refusal.INVALID, f"invalid decision: {exc}")
    several = len(c.request.actions) > 1
    stored = r.answers.list(c.run.thread_id, c.decision.interrupt_id) if several else {}
    case = replace(c, given=given, stored=stored)
    if case.partial and not given:
        return Refused(Refusal.INVALID, "invalid decision: every decision is null")
    taken = [stored[i] for i in sorted(given) if i in stored]
    if taken:
        first = taken[0]
        through = Source.label_of(first.source) or "another channel"
        return Refused(
            Refusal.DECIDED,
            f"question {first.position + 1} of this request was already answered by "
            f"{first.reviewer} through {through} on {moment(first.at or 0)}; an answer is not "
            "asked again",
            {
                "run": c.run.thread_id,
                "request": c.decision.interrupt_id,
                "answered_at": iso_utc(first.at or 0),
            },
        )
    return case


def vouched_now(r: Pipeline, c: Case) -> Case | Refused:
    """A person a source names without authenticating them (the inbox CLI, a webhook, a polled
    inbox, a Slack link: ``Decision.groups`` None) decides only while the product has not ended
    their power: every key of theirs revoked refuses them here as it refuses their key, session,
    Slack link and e-mail links everywhere else (a source that authenticated them checked the
    credential it holds)."""
    if c.decision.groups is None:
        for name in c.decision.approvers:
            if r.keys.revoked_only(name):
                return Refused(
                    Refusal.UNAUTHORIZED,
                    f"every API key of {name} is revoked: they decide through no channel "
                    "until given a new key",
                )
    return c


def workflow_checks(r: Pipeline, c: Case) -> Case | Refused:
    """The workflow's own judgement of every approving answer, as the business stands now
    (what is still refundable, the budget left), if it offers one: ``check_edit(tool, args)``
    raising ``UserError``. A plain approve is judged on the proposed arguments like an edit on
    its own: the ledger may have moved since the proposal (a duplicate request whose order was
    refunded meanwhile)."""
    check = r.graphs.workflow(c.run.workflow).check_edit
    try:
        for i, decision in sorted(c.given.items()):
            before = c.request.actions[i]
            if isinstance(decision, Edit):
                check(before.name, decision.args or {})
            elif isinstance(decision, Approve):
                check(before.name, before.args)
    except UserError as exc:
        return Refused(Refusal.INVALID, f"invalid decision: {exc}")
    return c


def delegated(r: Pipeline, c: Case) -> Case | Refused:
    """A delegate decides as ``bob for alice`` with what alice lent, while it is lent now."""
    resolved = delegation.resolve(c.decision, c.run, c.approving, r.delegations, r.clock())
    if isinstance(resolved, Refused):
        return resolved
    d, acting = resolved
    return replace(c, decision=d, acting=acting, approvers=distinct(d.approvers))


def duties(r: Pipeline, c: Case) -> Case | Refused:
    """Separation of duties: the requester never approves their own run."""
    if c.approving:
        try:
            check_duties(c.approvers, c.run.requested_by, c.run.separation, "this request")
        except SelfApproval as exc:
            return Refused(Refusal.DUTIES, str(exc), {"run": c.run.thread_id})
    return c


def authority_and_quorum(r: Pipeline, c: Case) -> Case | Refused:
    """The quorum of the request as it will run (the policy's, fixed on the run and judged
    again after an edit, and its authority band's), and every approver's authority: the band of
    the cumulative amount they approve for one object (an order, a cost center), what they
    approved before included, so a request split below a band does not pass it."""
    flow = r.graphs.workflow(c.run.workflow)
    edited = _edited(c.request, c.merged)
    needed = max(c.run.quorum or 1, flow.quorum(edited))
    if c.run.authority is None:
        return replace(c, needed=needed)
    charges = authority.charges_of(flow, edited)
    mine = sorted(i for i, x in c.given.items() if x.approving)
    keyed = delegation.keys(c.approvers, c.acting)
    amounts: dict[str, Decimal | None] = {}
    approved: list[Approved] = []
    for name in c.approvers if mine else []:
        principal = keyed[name][0]
        subjects = [charges[i].subject for i in mine]
        these = {(c.run.thread_id, c.decision.interrupt_id, i) for i in mine}  # not twice
        before = r.amounts.totals(principal, [s for s in subjects if s is not None], these)
        amounts[name] = authority.cumulative([charges[i] for i in mine], before)
        approved += [
            Approved(c.run.thread_id, c.decision.interrupt_id, i, principal, s, amount)
            for i in mine
            if (s := charges[i].subject) is not None and (amount := charges[i].amount) is not None
        ]
    whole = authority.request_amount(flow, edited)
    band = authority.check(c.run.authority, amounts, c.decision.groups, r.keys.groups_of, whole)
    if isinstance(band, Refused):
        return band
    return replace(c, needed=max(needed, band.quorum), approved=tuple(approved))


def parts_need_one_approver(r: Pipeline, c: Case) -> Case | Refused:
    """Answers in parts are one person's each: a request that needs a quorum is decided whole."""
    if c.partial and c.needed > 1:
        return Refused(
            Refusal.INVALID,
            f"invalid decision: this request needs {c.needed} approvers, so every action is "
            "decided at once (no null)",
        )
    return c


PIPELINE: tuple[Rule, ...] = (
    not_halted,
    request_and_digest,
    typed_answers,
    vouched_now,
    workflow_checks,
    delegated,
    duties,
    authority_and_quorum,
    parts_need_one_approver,
)
"""The order every decision is judged in, after the deadline and the run's state
(:meth:`Pipeline.still_waiting`): written once, here."""


def needs(r: Pipeline, run: Run, request: HitlRequest | None = None) -> str | None:
    """Who may approve the request a run waits on, as every view shows it (``2 approvers, each
    one of finance``): the band of the request's amount and the quorum the path counts; of
    ``request`` when given (an edit's: its new total may fall in another band)."""
    if run.request is None:  # the quorum fixed when it paused
        return authority.needs(None, None, run.quorum or 1)
    request = request or run.asked
    flow = r.graphs.workflow(run.workflow)
    quorum = max(run.quorum or 1, flow.quorum(request))
    if run.authority is None:
        return authority.needs(None, None, quorum)
    return authority.needs(run.authority, authority.request_amount(flow, request), quorum)


def _edited(request: HitlRequest, given: dict[int, Verdict]) -> HitlRequest:
    """The request as it will run: each edit's arguments (the policy judges it again, since
    an edit may raise an amount past the quorum amount)."""
    return request.edited([given.get(i) or Approve() for i in range(len(request.actions))])


_STATE_WORDS = {
    Status.RUNNING: "the run is in progress",
    Status.RESUMING: "a decision is being carried out",
    Status.DONE: "the run has finished",
    Status.FAILED: "the run failed",
    Status.CANCELLED: "the run was cancelled",
    Status.EXPIRED: "the request expired",
}


def _expired(named: dict[str, str], run: Run) -> Refused:
    """Too late, in the reviewer's words: when, in the display zone; the ids in details."""
    at = run.expires_at or 0
    return Refused(
        Refusal.EXPIRED,
        f"this request expired on {moment(at)}; a decision is no longer accepted (ask for "
        "a new request if the action is still wanted)",
        {**named, "expired_at": iso_utc(at)},
    )


def _decided(named: dict[str, str], claim: AuditEvent) -> Refused:
    """Someone was first: who, through which channel and when (display zone)."""
    detail = claim.facts
    label = Source.label_of(detail.get("source"))
    through = f" through {label}" if label else ""
    who = ", ".join(detail.get("approvers") or []) or "another reviewer"
    at = claim.at
    return Refused(
        Refusal.DECIDED,
        f"this request was already decided by {who}{through} on {moment(at)}; a decision "
        "cannot be changed",
        {**named, "decided_at": iso_utc(at)},
    )
