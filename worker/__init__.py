"""The worker itself: runs a LangGraph thread one segment at a time and moves its ``runs`` row
through the state machine, independent of any particular workflow.

- :mod:`worker.workflows`: the ``Workflow`` protocol and where workflows are found by name.
- :mod:`worker.requests`: LangGraph interrupts to HITL approval requests, decisions to resumes.
- :mod:`worker.policy`: the approval window, the escalation ladder, separation of duties.
- :mod:`worker.context`: what every step shares (store, inbox, runs, compiled graphs).
- :mod:`worker.segment`: one segment, its lease heartbeat, pause, failure and cancel handling.
- :mod:`worker.lifecycle`: start, claim, resume, cancel, retry.
- :mod:`worker.sweep`: the recovery pass (reclaims, answered approvals, ladder, expiry, retries).
- :mod:`worker.runner`: ``Runner`` (all of the above) and ``open_runner``.
- :mod:`worker.outcome`, :mod:`worker.refusals`: what those calls return.

It imports ``inbox``, ``store`` and ``core`` only; the demo workflows in ``agent`` plug in by name.
"""
