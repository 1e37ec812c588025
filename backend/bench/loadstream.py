"""The load test's streamed requests over aiohttp, the client `vllm bench serve` uses.

Why not httpx, which the rest of qwen-tui uses: its pure-Python stack (httpcore, h11, anyio) costs
~0.24 ms of CPU per streamed token against aiohttp's ~0.07 (benchmarks/bench_client_cpu.py: a FAKE
server, 8 streams, 2026-12-01). With 8 streams at ~100 tok/s each that is a fifth of a core, and on
the 2-core demo box it is taken from the server being measured: `bench_vs_vllm.py` read 0.79x
vLLM's output tok/s there, with the clients on the API server's core. The chunks go through
chat.handle_line, as the chat's do; errors are the chat's ChatErrors.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from backend.chat.stream import (
    ChatError,
    ChatResult,
    connect_error,
    cut_error,
    explain_http_error,
    handle_line,
    stuck_error,
)


def new_session(concurrency: int, api_key: str | None, read_timeout_s: float) -> aiohttp.ClientSession:
    """One session for the whole run: `concurrency` + 4 kept-alive connections, loopback only
    (no proxy from the environment: trust_env off)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency + 4),
        headers=headers, trust_env=False,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=read_timeout_s))


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
    """POST, once more when the first closed before any answer came back: a
    kept-alive connection the server had just closed (uvicorn closes idle ones after 5 s; CI saw one
    request of a sweep cut so). Before the status line nothing was accepted (vLLM's streamed reply
    sends it first), so the request is not sent twice; a cut after it is a cut reply, never retried."""
    try:
        return await session.post(url, json=body)
    except aiohttp.ServerDisconnectedError:
        return await session.post(url, json=body)  # the broken connection has left the pool


async def stream(session: aiohttp.ClientSession, base_url: str, model: str, body: dict[str, Any],
                 result: ChatResult) -> None:
    """POST one streamed chat request and fill `result`; its clock starts at the send."""
    start = time.perf_counter()
    try:
        async with await _post(session, base_url + "/v1/chat/completions", body) as resp:
            if resp.status >= 400:
                raise explain_http_error(resp.status, await resp.text(errors="replace"), model)
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                if b"\n" not in chunk:
                    continue
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    if raw.startswith(b"data:"):
                        handle_line(raw.decode("utf-8", "replace"), result, start)
            if buf.startswith(b"data:"):
                handle_line(buf.decode("utf-8", "replace"), result, start)
    except aiohttp.ClientConnectorError as e:
        raise connect_error(base_url, e) from None
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as e:
        raise cut_error(e) from None
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as e:
        raise stuck_error(session.timeout.sock_read or 0, e) from None
    except aiohttp.ClientError as e:
        raise ChatError(f"{type(e).__name__}: {e}", "see the server log") from None
    finally:
        result.total_s = time.perf_counter() - start
