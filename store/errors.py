"""The error type for problems a user can cause and fix."""


class UserError(Exception):
    """A problem the user can fix (bad input, missing setting); its message says how.

    Entry points print it as one ``error: ...`` line and exit 2, never a traceback.
    """
