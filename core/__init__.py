"""What every layer shares and nothing else: settings, user errors, limits, logging, fault
points, the entry wrapper.

:mod:`core.settings` declares every environment variable once; :mod:`core.errors` holds the
error a user can fix, the one-line form of any error and secret scrubbing; :mod:`core.limits`
bounds every input; :mod:`core.logs` shapes log lines (JSON or text, request and thread ids);
:mod:`core.faults` is the fault injection the crash tests use; :mod:`core.cli` wraps entry points
(one ``error:`` line, exit 2) and :mod:`core.coldstart` speeds up the start of those that run
once per run or event; :mod:`core.hitl` and :mod:`core.questions` are the approval
payload's types (the request a paused run carries, the decisions that answer it), here because
``store/`` holds them on its rows and ``worker/`` and ``inbox/`` read them.
It imports nothing else of the project, so every package may import it.
"""
