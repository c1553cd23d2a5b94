"""The worker itself: runs a LangGraph thread one segment at a time, moves its ``runs`` row
through the state machine and judges every decision on it, independent of any workflow.

Small objects, each with one job, wired in :mod:`worker.runner`:

- :mod:`worker.workflows`: the ``Workflow`` protocol and where workflows are found by name.
- :mod:`worker.graphs`: each workflow's compiled graph and edit schemas, once per process.
- :mod:`worker.requests`: LangGraph interrupts to HITL approval requests, decisions to resumes.
- :mod:`worker.policy`: the approval window, the escalation ladder, separation of duties.
- :mod:`worker.segment`: one segment, its lease heartbeat, pause, failure and cancel handling.
- :mod:`worker.decisions`: the one decision path every source of decisions calls.
- :mod:`worker.lifecycle`: start, resume what was claimed, take up a handed-off claim, cancel,
  retry.
- :mod:`worker.sweep`: the recovery pass (reclaims, inboxes' answers, ladder, expiry, retries).
- :mod:`worker.runner`: ``Runner`` (the wiring) and ``open_runner``.
- :mod:`worker.outcome`, :mod:`worker.refusals`: what those calls return, and the one refusal.
- :mod:`worker.cli`: what the commands print, and the inbox command line as a decision source.

It imports ``ops``, ``inbox``, ``store`` and ``core`` only; the demo workflows in ``agent`` plug
in by name.
"""
