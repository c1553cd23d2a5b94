"""How a segment (or an attempt to start, claim or sweep one) ended, for printing and the API."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from store.states import Run, Status


class Note(StrEnum):
    """What happened besides the row's status (which a note leaves as it was)."""

    INTERRUPTED = "interrupted"  # a database error stopped it; the row keeps its lease
    REMINDED = "reminder"  # the ladder: the run keeps waiting
    ESCALATED = "escalated"
    HALTED = "halted"  # a halt stopped it before its next side effect; unhalt resumes it
    TAKEN = "taken"  # queued by this caller, taken by a running resumer before it could


@dataclass
class Outcome:
    thread_id: str
    status: Status | None  # None: no such run
    interrupt_id: str | None = None
    result: str | None = None
    error: str | None = None
    started: bool = True
    note: Note | None = None

    @property
    def failed(self) -> bool:
        return self.status == Status.FAILED and self.note is None

    def line(self) -> str:
        """One line, always: scripts read run.py's stdout line by line, and a model's answer
        may span paragraphs (the full text stays in the run's ``result``)."""
        if self.note in (Note.REMINDED, Note.ESCALATED):
            text = self.result or str(self.note)
        elif self.note == Note.HALTED:
            text = f"stopped: {self.error}; `approval-worker unhalt` resumes it"
        elif self.note == Note.TAKEN:
            text = f"taken by a running resumer ({self.status} now)"
        elif self.note == Note.INTERRUPTED:
            text = f"interrupted ({self.error}); recovery takes it over when its lease ends"
        elif self.status == Status.WAITING:
            text = f"paused on interrupt {self.interrupt_id} - state saved, exiting"
        elif self.status in (Status.DONE, Status.EXPIRED, Status.CANCELLED):
            text = " ".join((self.result or "").split())
        elif self.status == Status.FAILED:
            text = f"failed: {self.error}"
        else:
            text = str(self.status or "unknown")
        if not self.started:
            return f"run {self.thread_id} already exists ({self.status}): {text}"
        return text


def outcome_of(run: Run, *, started: bool = False) -> Outcome:
    return Outcome(run.thread_id, run.status, run.interrupt_id, run.result, run.error, started)
