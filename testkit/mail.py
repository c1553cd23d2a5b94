"""A local SMTP server (``aiosmtpd``) on 127.0.0.1 that keeps what it receives, so the worker's
real ``smtplib`` client sends real mail in tests; and the links read back out of a message."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default
from typing import Any, cast

from testkit.servers import HOST, free_port


@dataclass
class MailBox:
    port: int = field(default_factory=free_port)
    received: list[tuple[list[str], EmailMessage]] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)  # addresses answered 550 at RCPT
    # a slow server: seconds each message's DATA takes to be answered (the bench's 2 s)
    delay: float = 0.0
    # while set, DATA is not answered (a server stuck mid-message) until ``release()``
    held: threading.Event | None = None
    peers: list[Any] = field(default_factory=list)  # the client end of each message's session
    _controller: Any = None

    def start(self) -> MailBox:
        from aiosmtpd.controller import Controller

        box = self

        class Handler:
            async def handle_RCPT(self, server, session, envelope, address, options):  # noqa: N802
                if address in box.refuse:
                    return "550 5.1.1 no such mailbox"
                envelope.rcpt_tos.append(address)
                return "250 OK"

            async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's
                if box.delay:
                    await asyncio.sleep(box.delay)  # the slow server the bench plays
                while box.held is not None and box.held.is_set():
                    await asyncio.sleep(0.01)  # stuck until the test releases it
                box.peers.append(session.peer)
                message = cast(EmailMessage, message_from_bytes(envelope.content, policy=default))
                box.received.append((list(envelope.rcpt_tos), message))
                return "250 OK"

        self._controller = Controller(Handler(), hostname=HOST, port=self.port)
        self._controller.start()
        return self

    def hold(self) -> None:
        """From now on, answer no DATA until :meth:`release` (the sender waits on us)."""
        self.held = threading.Event()
        self.held.set()

    def release(self) -> None:
        if self.held is not None:
            self.held.clear()

    def stop(self) -> None:
        self.release()
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def to(self, address: str, about: str) -> list[EmailMessage]:
        """Messages to ``address`` about a run (its thread id, in the ``X-Approval-Run``
        header) or whose text mentions ``about``."""
        return [
            m
            for rcpt, m in self.received
            if address in rcpt and (m.get("X-Approval-Run") == about or about in text_of(m))
        ]

    def wait_for(self, address: str, about: str, timeout: float = 30.0) -> EmailMessage:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.to(address, about)
            if found:
                return found[-1]
            time.sleep(0.05)  # polls until the mail arrives (deadline above)
        raise AssertionError(f"no mail to {address} about {about!r}: {len(self.received)} in all")


def text_of(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain",))
    text = "" if part is None else str(cast(EmailMessage, part).get_content())
    return text.replace("\r\n", "\n")  # as it crossed SMTP


def links(message: EmailMessage) -> dict[str, str]:
    """``{"approve": url, "reject": url}`` as the message lists them."""
    found = re.findall(r"^(Approve|Reject): (\S+)$", text_of(message), re.M)
    return {verb.lower(): url for verb, url in found}
