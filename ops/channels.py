"""The senders of this process's channels, as one object built where the process is built
(the app, the command line, ``recover.py``, the lambda handler: each builds its runner with
it). Built, not registered at import: a process sends Slack and mail rows because it was
built with their senders, not because some module it happened to import added them.
"""

from __future__ import annotations

from inbox.outbox import Senders


def senders() -> Senders:
    """Slack and e-mail besides webhooks; e-mail is slow (an SMTP exchange may take seconds),
    so a sweep sends it last; its kept SMTP session closes when its lane goes idle; every
    attempt is counted. A channel that is not configured has no rows to send."""
    from ops import mail, metrics, slack, smtp

    return Senders(
        channels={"slack": slack.deliver, "mail": mail.deliver},
        slow=frozenset({"mail"}),
        on_idle=(smtp.idle,),
        on_sent=(metrics.count_sent,),
    )
