"""The suite's single HTTP requests to its own servers: what ``httpx.get``/``post`` do (a client
for one request: no cookie and no connection kept after it), over one transport per process.

Why: ``httpx.get`` builds a TLS context for every call (it reads certifi's bundle: about 25 ms of
CPU) for requests that are plain HTTP to 127.0.0.1, and the suite sends thousands of them on a
CPU-bound machine. No proxy from the environment either: the traffic never leaves loopback.
"""

from __future__ import annotations

from typing import Any

import httpx

# no keep-alive: a pooled connection could meet a server's idle close, or a later server on the
# same port; each request opens its own connection, as httpx.get's does
_TRANSPORT = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))


def request(
    method: str,
    url: str,
    *,
    cookies: dict[str, str] | None = None,
    timeout: float | None = 5.0,
    follow_redirects: bool = False,
    **kwargs: Any,
) -> httpx.Response:
    client = httpx.Client(
        transport=_TRANSPORT,
        cookies=cookies,
        timeout=timeout,
        follow_redirects=follow_redirects,
        trust_env=False,
    )
    return client.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return request("POST", url, **kwargs)


def delete(url: str, **kwargs: Any) -> httpx.Response:
    return request("DELETE", url, **kwargs)
