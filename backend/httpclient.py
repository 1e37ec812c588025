"""The one place that builds HTTP clients for the local server (chat, load test, /metrics polls).

Every client talks to loopback only, never through a proxy (``trust_env=False``), and carries the
server's API key when one is set, so adding or changing a header is a change here alone.
Building an httpx client normally creates a fresh TLS context (~30 ms of CPU); these clients share
one, made on first use, so a client costs about a millisecond.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def headers(api_key: str | None = None) -> dict[str, str]:
    """The headers every request to the server carries."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _options(base_url: str | None, api_key: str | None, timeout: Any, limits: httpx.Limits | None,
             transport: Any) -> dict[str, Any]:
    opts: dict[str, Any] = {"trust_env": False, "verify": _tls(), "headers": headers(api_key),
                            "timeout": timeout if timeout is not None else httpx.Timeout(5.0)}
    if base_url:
        opts["base_url"] = base_url.rstrip("/")
    if limits is not None:
        opts["limits"] = limits
    if transport is not None:
        opts["transport"] = transport
    return opts


def async_client(base_url: str | None = None, api_key: str | None = None, *, timeout: Any = None,
                 limits: httpx.Limits | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """An AsyncClient for the server at ``base_url`` (requests may also use absolute URLs)."""
    return httpx.AsyncClient(**_options(base_url, api_key, timeout, limits, transport))


def sync_client(base_url: str | None = None, api_key: str | None = None, *, timeout: Any = None,
                limits: httpx.Limits | None = None,
                transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """A blocking Client, for polls made from a worker thread."""
    return httpx.Client(**_options(base_url, api_key, timeout, limits, transport))
