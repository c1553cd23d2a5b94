"""The e-mail lane's SMTP sessions: one per message, or kept open across a round.

``smtplib`` over STARTTLS, TLS or a plain local relay as ``SMTP_TLS`` says. The e-mail lane's
thread (``inbox.outbox``) keeps its session between messages, so a burst of requests to many
reviewers costs one TCP and TLS handshake and one login, not one each; the session is closed
when the lane goes idle, and a session the server closed meanwhile is opened anew.
"""

from __future__ import annotations

import smtplib
import ssl
import threading
from email.message import EmailMessage

from core import settings

SEND_TIMEOUT = 10.0


def _connect() -> smtplib.SMTP:
    """A new SMTP session, TLS and login done as the settings say."""
    host, port = str(settings.SMTP_HOST.get()), settings.SMTP_PORT.get()
    tls = settings.SMTP_TLS.get()
    context = ssl.create_default_context()
    smtp = (
        smtplib.SMTP_SSL(host, port, timeout=SEND_TIMEOUT, context=context)
        if tls == "ssl"
        else smtplib.SMTP(host, port, timeout=SEND_TIMEOUT)
    )
    try:
        if tls == "starttls":
            smtp.starttls(context=context)
        user = settings.SMTP_USERNAME.get()
        if user:
            smtp.login(user, settings.SMTP_PASSWORD.get() or "")
    except BaseException:
        _close(smtp)
        raise
    return smtp


def _close(smtp: smtplib.SMTP | None) -> None:
    if smtp is None:
        return
    try:
        smtp.quit()
    except (OSError, smtplib.SMTPException):
        smtp.close()


_KEPT = threading.local()  # the e-mail lane's open session, reused for its next message


def send_one(message: EmailMessage) -> None:
    """Send one message; raises what went wrong (``smtplib``'s exceptions carry reply codes,
    never the password). The e-mail lane's thread keeps its session open between messages of
    a round (one TCP and TLS handshake and one login for many), closed when the lane goes idle;
    any other thread uses a session of its own per message."""
    lane = threading.current_thread().name == "notify-mail"
    smtp: smtplib.SMTP | None = getattr(_KEPT, "smtp", None) if lane else None
    if smtp is not None:
        try:
            smtp.send_message(message)
            return
        except smtplib.SMTPServerDisconnected:  # the server closed it while idle: a new one
            _KEPT.smtp = None
        except BaseException:
            _KEPT.smtp = None
            _close(smtp)
            raise
    smtp = _connect()
    try:
        smtp.send_message(message)
    except BaseException:
        _close(smtp)
        raise
    if lane:
        _KEPT.smtp = smtp
    else:
        _close(smtp)


def idle(lane: str) -> None:
    """The e-mail lane has nothing more to send: close its session."""
    if lane == "mail":
        smtp, _KEPT.smtp = getattr(_KEPT, "smtp", None), None
        _close(smtp)
