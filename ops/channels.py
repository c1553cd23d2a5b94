"""The channels this product sends through besides webhooks (Slack, e-mail), wired in where a
process builds its outbox or kicks its sender, never registered by an import: a process that
delivers owed rows sends every channel's, whatever it happened to import before.
"""

from __future__ import annotations

from inbox.outbox import Channel


def senders() -> dict[str, Channel]:
    """Each channel's sender by the scheme of its rows' target (``slack:``, ``mail:<key>``)."""
    from ops import mail, slack  # they kick the sender with these, so imported on first use

    return {"slack": slack.deliver, "mail": mail.deliver}
