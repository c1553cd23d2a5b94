"""The Vigilator HTTP layer: settings, one pooled ``httpx.Client``, bounded retries with
backoff (honouring ``Retry-After``), and one-line errors that never carry the key."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from core import settings as config
from core.errors import UserError, one_line
from store.db import redact_url

if TYPE_CHECKING:
    import httpx

RETRY_STATUSES = frozenset({429, 502, 503, 504})
FATAL_STATUSES = frozenset({401, 402, 403, 404})  # every other call would fail the same way
MAX_BACKOFF = 8.0  # seconds, between two attempts of one call
MAX_RETRY_AFTER = 60.0  # a longer Retry-After gives up now rather than block a sweep


class VigilatorError(UserError):
    """A Vigilator call that failed for good (one line, no secrets).

    ``fatal`` means every other call would fail the same way (bad key, quota, wrong URL), so a
    sweep stops instead of repeating it a thousand times.
    """

    def __init__(self, message: str, *, status: int | None = None, fatal: bool = False):
        super().__init__(message)
        self.status = status
        self.fatal = fatal


@dataclass(frozen=True)
class Settings:
    """How to reach Vigilator; read from the environment by :meth:`from_env`."""

    api_key: str
    base_url: str = "https://api.vigilator.dev"
    timeout: float = 10.0
    retries: int = 4
    retry_base: float = 0.5
    concurrency: int = 16

    @classmethod
    def from_env(cls) -> Settings:
        key = config.VIGILATOR_API_KEY.get()
        if not key:
            raise UserError(
                "INBOX=vigilator needs VIGILATOR_API_KEY: set it to your Vigilator API key "
                "(see .env.example), or use INBOX=local"
            )
        return cls(
            api_key=key,
            base_url=config.VIGILATOR_BASE_URL.get(),
            timeout=config.VIGILATOR_TIMEOUT.get(),
            retries=config.VIGILATOR_RETRIES.get(),
            retry_base=config.VIGILATOR_RETRY_BASE_SECONDS.get(),
            concurrency=config.VIGILATOR_CONCURRENCY.get(),
        )


class Client:
    """The HTTP layer: one pooled ``httpx.Client``, bounded retries, one-line errors.

    Safe to share between threads (``get_many`` does), as ``httpx.Client`` is.
    """

    def __init__(self, settings: Settings, *, sleep: Callable[[float], None] = time.sleep):
        import httpx

        self.settings = settings
        self._httpx = httpx
        self._sleep = sleep
        pool = max(settings.concurrency, 4)
        self._http = httpx.Client(
            base_url=settings.base_url,
            headers={"x-api-key": settings.api_key, "accept": "application/json"},
            timeout=settings.timeout,
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
        )

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        missing_ok: bool = False,
        before_send: Callable[[], None] | None = None,
        reconcile: Callable[[], Any] | None = None,
    ) -> Any:
        """The decoded JSON of a 2xx (None for a 404 when ``missing_ok``), else VigilatorError.

        429/502/503/504, timeouts and connection errors are retried with capped, jittered
        backoff (or the server's Retry-After). Before a retry that could duplicate an effect
        (the last attempt may have reached the server), ``reconcile`` is asked first; whatever
        it finds is returned instead of sending again.
        """
        httpx = self._httpx
        attempts = self.settings.retries + 1
        maybe_sent = False
        last = ""
        for attempt in range(attempts):
            if attempt and maybe_sent and reconcile is not None:
                found = reconcile()
                if found is not None:
                    return found
            if before_send is not None:
                before_send()
            try:
                response = self._http.request(method, path, json=body, params=params)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                last, wait = one_line(exc, 200), self._backoff(attempt)  # never sent
            except httpx.TransportError as exc:  # read timeout, dropped connection, ...
                last, wait, maybe_sent = one_line(exc, 200), self._backoff(attempt), True
            else:
                status = response.status_code
                if response.is_success:
                    return _decode(response, what)
                if status == 404 and missing_ok:
                    return None
                if status not in RETRY_STATUSES:
                    raise self._error(response, what)
                last = f"HTTP {status}"
                maybe_sent = maybe_sent or status != 429  # a gateway error may hide a success
                after = _retry_after(response)
                wait = self._backoff(attempt) if after is None else after
                if after is not None and after > MAX_RETRY_AFTER:
                    raise VigilatorError(
                        f"Vigilator asked to wait {wait:.0f}s before {what} again; try again later",
                        status=status,
                    )
            if attempt + 1 < attempts:
                self._sleep(wait)
        if maybe_sent and reconcile is not None:
            found = reconcile()
            if found is not None:
                return found
        raise VigilatorError(
            f"Vigilator at {redact_url(self.settings.base_url)} did not answer {what} after "
            f"{attempts} attempt(s) (last: {last}); try again later"
        )

    def _backoff(self, attempt: int) -> float:
        delay = min(self.settings.retry_base * 2**attempt, MAX_BACKOFF)
        return delay * (0.5 + random.random() / 2)

    def _error(self, response: httpx.Response, what: str) -> VigilatorError:
        status = response.status_code
        code, message = _error_body(response)
        detail = self._clean(f"{status} {code}: {message}" if message else f"{status} {code}")
        base = redact_url(self.settings.base_url)
        if status == 401:
            text = (
                f"Vigilator rejected VIGILATOR_API_KEY ({detail}); check that the key is "
                "current and copied whole"
            )
        elif status == 402:
            text = (
                f"Vigilator quota or plan limit reached ({detail}); raise the plan or wait for "
                "the quota to reset, then try again"
            )
        elif status == 403:
            text = (
                f"Vigilator refused {what} ({detail}); the API key's organisation does not "
                "allow it or has reached a limit"
            )
        elif status == 404:
            text = f"Vigilator has nothing at {what} ({detail}); check VIGILATOR_BASE_URL={base}"
        elif status in (400, 422):
            text = f"Vigilator refused {what} as invalid ({detail})"
        else:
            text = f"Vigilator failed {what} ({detail}); try again later"
        return VigilatorError(text, status=status, fatal=status in FATAL_STATUSES)

    def _clean(self, text: str) -> str:
        """One line, bounded, and never the key, even if the server echoes it back."""
        text = " ".join(text.split()).replace(self.settings.api_key, "***")
        return text if len(text) <= 300 else text[:299] + "…"


def _decode(response: httpx.Response, what: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise VigilatorError(f"Vigilator answered {what} with a body that is not JSON") from None


def _error_body(response: httpx.Response) -> tuple[str, str | None]:
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return response.reason_phrase or "error", ""
    code = data.get("code") if isinstance(data.get("code"), str) else None
    message = data.get("message") if isinstance(data.get("message"), str) else ""
    return code or response.reason_phrase or "error", message


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - time.time())


# -- our request, their wire format ---------------------------------------------------------
