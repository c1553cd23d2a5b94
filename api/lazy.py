"""Building an app's routes on first need, for a host that starts a process per request burst.

A Lambda cold start that answers one webhook delivery would otherwise import and build every
route module (the run API, the pages, LangGraph's API, e-mail, Slack: FastAPI builds each
route's models as it is declared), about half a second it never uses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send


class Once:
    """``build`` run at most once, on the first call (from any thread)."""

    def __init__(self, build: Callable[[], None]) -> None:
        self._build: Callable[[], None] | None = build
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self._build is None

    def __call__(self) -> None:
        if self._build is None:
            return
        with self._lock:
            if self._build is not None:
                self._build()
                self._build = None


class LazyRoutes:
    """ASGI middleware, innermost: the app holds only the ``eager`` routes (a prefix of its
    full route list) until a request comes that none of them matches fully; ``complete`` then
    adds the rest, before that request is routed. The router takes the first full match in
    order, so a request an eager route matches fully is routed as the full app would route it;
    any other (a 404, a 405, the OpenAPI schema, a redirect) sees every route."""

    def __init__(self, app: ASGIApp, eager: Sequence[BaseRoute], complete: Once) -> None:
        self.app = app
        self._eager = tuple(eager)
        self._complete = complete

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._complete.done and not self._eager_match(scope):
            self._complete()
        await self.app(scope, receive, send)

    def _eager_match(self, scope: Scope) -> bool:
        if scope["type"] not in ("http", "websocket"):
            return False
        return any(route.matches(scope)[0] is Match.FULL for route in self._eager)
