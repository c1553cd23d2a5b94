"""The store's managers by name, so code outside ``store/`` asks for the operation it needs
(``store.tables.keys.get(...)``) instead of holding the database handle and building one: the
handle, and what may be done with it, stays inside ``store/``. Each manager returns typed rows
(built from their database row in the manager's module)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from store.answers import RunAnswers
    from store.approvals import RunApprovals
    from store.approved import ApprovedAmounts
    from store.audit_trail import AuditTrail
    from store.db import Database
    from store.decision_times import DecisionTimes
    from store.delegations import Delegations
    from store.deliveries import Deliveries
    from store.gauges import Counts
    from store.halts import Halts
    from store.inbox_requests import InboxRequests
    from store.keys import KeyStore
    from store.leases import LeaseRows
    from store.lg import LgTables
    from store.mail import EmailLinks
    from store.outbox import OutboxRows
    from store.ratelimits import RateLimits
    from store.reads import Reads
    from store.retention import Retention
    from store.run_reads import RunReads
    from store.sessions import SessionStore
    from store.slack import SlackTables
    from store.traces import TraceRows
    from store.vigilator import VigilatorRequests

Clock = Callable[[], float]


class Tables:
    """One store's managers; each is cheap to build, so each property builds it anew."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __eq__(self, other: object) -> bool:
        """The same store's tables, however often asked for (``store.tables`` builds anew):
        the outbox's senders keep one entry per store they were woken for."""
        return isinstance(other, Tables) and other._db is self._db

    def __hash__(self) -> int:
        return id(self._db)

    def before_close(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` before the store's connections close: a thread still sending through
        these tables finishes first."""
        self._db.before_close(hook)

    def runs(self, clock: Clock = time.time) -> RunReads:
        """The runs, read only: their transitions are the worker's ``RunStore``, which owes
        each one's notifications."""
        from store.run_reads import RunReads

        return RunReads(self._db, clock)

    def outbox(self) -> OutboxRows:
        from store.outbox import OutboxRows

        return OutboxRows(self._db)

    def inbox_requests(self) -> InboxRequests:
        from store.inbox_requests import InboxRequests

        return InboxRequests(self._db)

    def vigilator(self) -> VigilatorRequests:
        from store.vigilator import VigilatorRequests

        return VigilatorRequests(self._db)

    def keys(self, clock: Clock = time.time) -> KeyStore:
        from store.keys import KeyStore

        return KeyStore(self._db, clock)

    def approvals(self, clock: Clock = time.time) -> RunApprovals:
        from store.approvals import RunApprovals

        return RunApprovals(self._db, clock)

    def delegations(self, clock: Clock = time.time) -> Delegations:
        from store.delegations import Delegations

        return Delegations(self._db, clock)

    def rate_limits(self, clock: Clock = time.time) -> RateLimits:
        from store.ratelimits import RateLimits

        return RateLimits(self._db, clock)

    def sessions(self, clock: Clock = time.time) -> SessionStore:
        from store.sessions import SessionStore

        return SessionStore(self._db, clock)

    def deliveries(self, clock: Clock = time.time) -> Deliveries:
        from store.deliveries import Deliveries

        return Deliveries(self._db, clock)

    def slack(self) -> SlackTables:
        from store.slack import SlackTables

        return SlackTables(self._db)

    def email_links(self) -> EmailLinks:
        from store.mail import EmailLinks

        return EmailLinks(self._db)

    def lg(self) -> LgTables:
        from store.lg import LgTables

        return LgTables(self._db)

    def halts(self) -> Halts:
        from store.halts import Halts

        return Halts(self._db)

    def reads(self) -> Reads:
        from store.reads import Reads

        return Reads(self._db)

    def decision_times(self) -> DecisionTimes:
        from store.decision_times import DecisionTimes

        return DecisionTimes(self._db)

    def counts(self, *, max_attempts: int) -> Counts:
        """The gauges' counts (backlog, runs by state), read together."""
        from store.gauges import database_counts

        return database_counts(self._db, max_attempts=max_attempts)

    def audit(self) -> AuditTrail:
        from store.audit_trail import AuditTrail

        return AuditTrail(self._db)

    def retention(self) -> Retention:
        from store.retention import Retention

        return Retention(self._db)

    def answers(self, clock: Clock = time.time) -> RunAnswers:
        from store.answers import RunAnswers

        return RunAnswers(self._db, clock)

    def approved_amounts(self) -> ApprovedAmounts:
        from store.approved import ApprovedAmounts

        return ApprovedAmounts(self._db)

    def traces(self) -> TraceRows:
        from store.traces import TraceRows

        return TraceRows(self._db)

    def leases(self) -> LeaseRows:
        from store.leases import LeaseRows

        return LeaseRows(self._db)
