"""The Vigilator inbox: each approval request becomes a Vigilator interrupt, over its HTTP API.

Vigilator's ``POST api/interrupts`` has no idempotency key, and a POST that timed out may still
have created the interrupt. So every create is first recorded in ``vigilator_requests`` under the
pause's dedupe key (thread + graph interrupt ids), one process at a time may send it, and any
create that may already have landed (a timeout, a dropped connection, a gateway error, a process
that died mid-request) is reconciled by looking the interrupt up by ``externalId`` before it is
sent again. That lookup is ``GET api/interrupts?externalId=...`` returning a list of interrupt
records; it is the one part of the API this adapter assumes beyond the documented two endpoints.

Reads for a sweep go out in parallel (``VIGILATOR_CONCURRENCY``), so 1,000 waiting runs cost
about 1,000 / concurrency round trips of wall time instead of 1,000. httpx is imported only when
the first request is made, so commands that never talk to Vigilator do not pay for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from core.faults import fault
from core.hitl import HitlRequest
from inbox.base import Approval, Rules
from inbox.vigilator.client import Client, Settings, VigilatorError
from inbox.vigilator.wire import _epoch, _fingerprint, interrupt_body, to_approval

if TYPE_CHECKING:
    from store.tables import Tables

LOOKUP = "api/interrupts"

log = logging.getLogger(__name__)


class VigilatorInbox:
    """Approval requests as Vigilator interrupts; implements :class:`inbox.base.Inbox`."""

    name = "vigilator"

    def __init__(
        self,
        tables: Tables,
        settings: Settings | None = None,
        *,
        client: Client | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.creates = tables.vigilator()
        self.settings = settings or Settings.from_env()
        self.clock = clock
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = Client(self.settings)
            return self._client

    def shutdown(self) -> None:
        if self._client is not None:
            self._client.close()

    def close(self, interrupt_id: str, status: str) -> bool:
        """Vigilator's API has no call that closes or cancels an interrupt, so the request stays
        open there; the worker records that, and ignores an answer that comes later."""
        return False

    def mark_ladder(self, interrupt_id: str, step: str) -> None:
        """Nothing to mark: Vigilator runs its own escalations (they arrive as
        ``interrupt.escalated`` webhooks); the sweep's ladder is on the run's audit trail."""

    def _send_lease(self) -> float:
        """Long enough for one attempt (the timeout applies to connect, write and read each);
        extended before every attempt. A process that died mid-send blocks others this long."""
        return 3 * self.settings.timeout + 1.0

    def open(
        self,
        *,
        external_id: str,
        dedupe_key: str,
        title: str,
        description: str,
        request: HitlRequest,
        args_schemas: dict[str, Any],
        conversation: list[dict[str, Any]] | None = None,
        rules: Rules | None = None,
    ) -> str:
        """Idempotent per ``dedupe_key``: a retried segment (or a retried POST) gets the same
        interrupt back, and Vigilator holds one interrupt per pause. The ``rules`` are enforced
        when a decision is claimed (Vigilator has no place for them)."""
        body = interrupt_body(
            external_id=external_id,
            title=title,
            description=description,
            request=request,
            args_schemas=args_schemas,
            conversation=conversation,
        )
        self.creates.record(
            dedupe_key=dedupe_key, external_id=external_id, body=body, now=self.clock()
        )
        deadline = time.monotonic() + 2 * self._send_lease()
        while True:
            row = self.creates.get(dedupe_key)
            if row.interrupt_id:
                return row.interrupt_id
            now = self.clock()
            if self.creates.take_send(dedupe_key, now=now, until=now + self._send_lease()):
                break
            if time.monotonic() > deadline:
                raise VigilatorError(
                    f"another process is still creating the Vigilator interrupt for "
                    f"{dedupe_key}; try again shortly"
                )
            time.sleep(0.2)
        try:
            # The body recorded first is the one sent, so every retry asks for the same thing.
            return self._create(dedupe_key, row.external_id, row.body, row.attempts > 0)
        finally:
            self.creates.release_send(dedupe_key)

    def _create(
        self, dedupe_key: str, external_id: str, body: dict[str, Any], uncertain: bool
    ) -> str:
        def reconcile() -> dict[str, Any] | None:
            return self._find_created(external_id, body)

        if uncertain:  # an earlier attempt may have landed: look before sending again
            found = reconcile()
            if found is not None:
                return self._opened(dedupe_key, found["id"])

        def count_attempt() -> None:
            self.creates.count_attempt(dedupe_key, until=self.clock() + self._send_lease())

        record = self.client.request(
            "POST",
            "api/interrupts",
            what="POST api/interrupts",
            body=body,
            before_send=count_attempt,
            reconcile=reconcile,
        )
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise VigilatorError("Vigilator answered POST api/interrupts without an interrupt id")
        fault("vigilator.created")
        return self._opened(dedupe_key, record["id"])

    def _opened(self, dedupe_key: str, interrupt_id: str) -> str:
        if not self.creates.record_opened(dedupe_key, interrupt_id, now=self.clock()):
            row = self.creates.find(dedupe_key)
            if row and row.interrupt_id:
                return row.interrupt_id  # recorded by a process that got there first
        return interrupt_id

    def _find_created(self, external_id: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """The interrupt an earlier attempt created for this body, if Vigilator has one.

        Among the thread's interrupts, it is one with the same title and actions that no other
        pause of ours has recorded; the oldest, should a race have made two.
        """
        records = self.client.request(
            "GET",
            LOOKUP,
            what="GET api/interrupts?externalId=...",
            params={"externalId": external_id},
        )
        if isinstance(records, dict):  # tolerate a wrapped list
            records = records.get("data") or records.get("interrupts") or []
        known = self.creates.known_interrupt_ids(external_id)
        wanted = _fingerprint(body)
        matches = [
            r
            for r in records
            if isinstance(r, dict)
            and r.get("externalId") == external_id
            and isinstance(r.get("id"), str)
            and r["id"] not in known
            and _fingerprint(r) == wanted
        ]
        if not matches:
            return None
        return min(matches, key=lambda r: (_epoch(r.get("createdAt")) or 0.0, r["id"]))

    def get(self, interrupt_id: str) -> Approval | None:
        record = self.client.request(
            "GET",
            f"api/interrupts/{quote(interrupt_id, safe='')}",
            what=f"GET api/interrupts/{interrupt_id}",
            missing_ok=True,
        )
        return None if record is None else to_approval(record)

    def get_many(self, interrupt_ids: list[str]) -> dict[str, Approval]:
        """Fetch in parallel, at most ``VIGILATOR_CONCURRENCY`` requests in flight.

        An interrupt that cannot be read this time is skipped (the next sweep tries again);
        an error every request would share (key, quota, URL) stops the sweep.
        """
        ids = list(dict.fromkeys(i for i in interrupt_ids if i))
        if not ids:
            return {}
        self.client  # noqa: B018 - create the shared client before the threads race for it
        found: dict[str, Approval] = {}
        workers = min(self.settings.concurrency, len(ids))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vigilator") as pool:
            futures = {pool.submit(self.get, i): i for i in ids}
            for future in as_completed(futures):
                try:
                    approval = future.result()
                except VigilatorError as exc:
                    if exc.fatal:
                        pool.shutdown(wait=False, cancel_futures=True)
                        raise
                    log.warning("interrupt %s skipped this sweep: %s", futures[future], exc)
                    continue
                if approval is not None:
                    found[futures[future]] = approval
        return found
