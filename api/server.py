"""The HTTP server's side of slow clients: uvicorn closes an idle keep-alive connection, but
any byte cancels that timer and nothing bounds how long a request's headers may take, so 300
connections trickling headers were all still open after 30 s. :class:`TimedH11Protocol` is
uvicorn's h11 protocol with a deadline for the headers (``HEADER_READ_SECONDS``) from the
connection's start and from the end of each response; a connection past it is closed. The
body's deadline is the app's (``api.limits.BodyLimit``)."""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from core import settings


class TimedH11Protocol(H11Protocol):
    _headers_due: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        self._disarm()
        seconds = settings.HEADER_READ_SECONDS.get()
        self._headers_due = self.loop.call_later(seconds, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _headers_too_slow(self) -> None:
        self._headers_due = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()  # h11 has no request to answer: a close is the answer

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the headers are in: the body has the app's deadline

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request's headers (keep-alive)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
