"""What each person has approved, per business object: one row per approved action and
principal, with the object it is counted on (an order, a cost center) and its amount. The
authority matrix judges the cumulative amount a principal approves for one object
(``worker.authority``), so splitting a refund into requests below a band never passes it. Rows
are written with the answer or the claim that makes an approval binding, never on a refusal.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from decimal import Decimal

from store.db import Database, Tx

ADD = """
INSERT INTO approved_amounts (thread_id, interrupt_id, position, principal_key, subject,
                              amount, at)
VALUES (:thread_id, :interrupt_id, :position, :principal_key, :subject, :amount, :at)
ON CONFLICT (thread_id, interrupt_id, position, principal_key) DO NOTHING
"""
# bounded: a person approves an object a handful of times, never thousands
FOR_PRINCIPAL = """
SELECT thread_id, interrupt_id, position, subject, amount FROM approved_amounts
WHERE principal_key = :principal_key AND subject IN ({subjects})
ORDER BY at LIMIT 10000
"""


@dataclass(frozen=True)
class Approved:
    """One action a principal approved: counted on ``subject`` for ``amount``."""

    thread_id: str
    interrupt_id: str
    position: int
    principal_key: str
    subject: str
    amount: Decimal


class ApprovedAmounts:
    def __init__(self, db: Database):
        self.db = db

    def totals(
        self,
        principal_key: str,
        subjects: Iterable[str],
        skip: Collection[tuple[str, str, int]] = (),
    ) -> dict[str, Decimal]:
        """What ``principal_key`` approved so far for each of ``subjects`` (0 where nothing),
        but the actions in ``skip`` (thread, interrupt, position): those being judged again."""
        wanted = sorted(set(subjects))[:100]
        out = dict.fromkeys(wanted, Decimal(0))
        if not wanted:
            return out
        names = {f"s{i}": s for i, s in enumerate(wanted)}
        sql = FOR_PRINCIPAL.format(subjects=", ".join(f":{n}" for n in names))
        for row in self.db.all(sql, {"principal_key": principal_key, **names}):
            if (row["thread_id"], row["interrupt_id"], row["position"]) not in skip:
                out[row["subject"]] += Decimal(row["amount"])
        return out


def record(tx: Tx, rows: Iterable[Approved], at: float) -> None:
    """Inside the transaction that makes the approvals binding (an answer, a claim)."""
    for r in rows:
        tx.execute(ADD, {**vars(r), "amount": str(r.amount), "at": at})
