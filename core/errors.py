"""The error type for problems a user can cause and fix, and the one-line form of any error."""


class UserError(Exception):
    """A problem the user can fix (bad input, missing setting); its message says how.

    Entry points print it as one ``error: ...`` line and exit 2, never a traceback.
    """


def one_line(exc: BaseException, limit: int = 500) -> str:
    """``Type: first line of the message``, cut to ``limit``: what runs, logs and outboxes keep."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:limit] if text else type(exc).__name__


def scrub(text: str) -> str:
    """``text`` with the value of every sensitive setting (secrets, keys, the database URL and
    its password) replaced by ``***``: applied to every log line."""
    from core.settings import SETTINGS

    for setting in SETTINGS:
        if not setting.sensitive:
            continue
        value = setting.raw()
        if not value or len(value) < 4:
            continue
        text = text.replace(value, "***")
        if setting.name == "DATABASE_URL":
            from urllib.parse import urlsplit

            try:
                password = urlsplit(value).password
            except ValueError:
                password = None
            if password and len(password) >= 4:
                text = text.replace(password, "***")
    return text
