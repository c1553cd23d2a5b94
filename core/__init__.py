"""What every layer shares and nothing else: settings, user errors, fault points, entry wrapper.

:mod:`core.settings` declares every environment variable once; :mod:`core.errors` holds the
error a user can fix and the one-line form of any error; :mod:`core.faults` is the fault
injection the crash tests use; :mod:`core.cli` wraps entry points (one ``error:`` line, exit 2).
It imports nothing else of the project, so every package may import it.
"""
