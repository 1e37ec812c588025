"""Streaming chat against the local OpenAI-compatible endpoint, with the figures people watch.

Time to first token runs from the request's send to the first chunk with a choice (vLLM sends it
when the first token exists, whether or not that token decodes to text); tokens are the server's
usage counts; decode tokens/s is tokens after the first over the time after the first token, and is
withheld ("burst") when the tokens reached the client together. Definitions match `vllm bench serve`.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from backend.settings.spec import CHAT

# C0 controls but tab and newline, DEL, and the C1 range: a random (or hostile) model's ESC, NUL or
# BEL would drive the terminal
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_text(text: str) -> str:
    """The text with its control characters dropped (carriage returns become newlines)."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


class ChatError(Exception):
    """A request that failed, with what to do about it."""

    def __init__(self, message: str, fix: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.message, self.fix, self.status = message, fix, status


@dataclass
class Delta:
    text: str
    reasoning: str = ""


BURST_GAP_S = 0.001  # chunks closer than this reached the client together: no gap to measure
MIN_STEPS = 8  # a rate needs tokens spread over at least this many measurable gaps (or all of them)


@dataclass
class ChatResult:
    """What one streamed reply measured.

    Times are seconds from the request's send. The first token is the first chunk that carries a
    choice: vLLM sends it (the assistant role) once the first token exists, even when that token's
    text is empty, which is also when `vllm bench serve` takes its TTFT. Tokens are counted from
    the server's usage (``completion_tokens``, per chunk with vLLM's ``continuous_usage_stats``),
    never from the text, so tokens that decode to nothing still count.
    """

    text: str = ""
    model: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    total_s: float = 0.0
    chunks: int = 0  # chunks that carried text
    extra: dict[str, Any] = field(default_factory=dict)
    chunk_times: list[float] = field(default_factory=list)  # every chunk with a choice, from send
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (time, tokens so far) as usage grew

    @property
    def tokens(self) -> int:
        """Output tokens: the server's count when it gave one, else the chunks with text."""
        return self.completion_tokens if self.completion_tokens is not None else self.chunks

    @property
    def last_token_s(self) -> float | None:
        return self.chunk_times[-1] if self.chunk_times else (self.total_s or None)

    @property
    def itl_s(self) -> list[float]:
        """Gaps between consecutive chunks after the first (how vLLM's bench pools ITL)."""
        t = self.chunk_times
        return [b - a for a, b in zip(t, t[1:], strict=False)]

    def _groups(self) -> list[int]:
        """Tokens per group of chunks that reached the client together (gaps < BURST_GAP_S)."""
        steps = self.arrivals or [(t, i + 1) for i, t in enumerate(self.chunk_times)]
        groups: list[int] = []
        last_t, last_n = None, 0
        for t, n in steps:
            if last_t is None or t - last_t >= BURST_GAP_S:
                groups.append(0)
            groups[-1] += n - last_n
            last_t, last_n = t, n
        return groups

    @property
    def burst(self) -> bool:
        """Tokens came in bursts: too few measurable gaps, or most tokens at one moment."""
        n = self.tokens
        if n < 2:
            return False
        groups = self._groups()
        if not groups:  # nothing timed (a result built by hand): no evidence of a burst
            return False
        return len(groups) - 1 < min(n - 1, MIN_STEPS) or max(groups) > n / 2

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens after the first over the time after the first token (burst or not)."""
        n, last = self.tokens, self.last_token_s
        if self.ttft_s is None or n < 2 or last is None:
            return None
        decode = last - self.ttft_s
        return (n - 1) / decode if decode > 0 else None

    @property
    def decode_tokens_per_s(self) -> float | None:
        """The decode rate, or None when the tokens came in bursts (no rate can be measured)."""
        return None if self.burst else self.tokens_per_s

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "model": self.model, "finish_reason": self.finish_reason,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "ttft_s": self.ttft_s, "total_s": self.total_s, "tokens_per_s": self.tokens_per_s,
                "burst": self.burst, "decode_tokens_per_s": self.decode_tokens_per_s,
                "text_chunks": self.chunks}


def explain_http_error(status: int, body: str, model: str) -> ChatError:
    try:
        message = json.loads(body).get("error", {}).get("message") or body
    except (ValueError, AttributeError):
        message = body
    message = str(message).strip()[:500]
    if status == 404 and "does not exist" in message:
        valid = re.search(r"Valid aliases?:\s*(.+?)\.?$", message)
        hint = f" The server serves: {valid.group(1)}." if valid else ""
        return ChatError(f"404: {message}", f"use the served model name, not {model!r}.{hint} "
                         "It is server.served_model_name (GET /v1/models lists it).", status)
    if status == 400 and ("max_tokens" in message or "context length" in message
                          or "maximum context" in message or "max_model_len" in message):
        return ChatError(f"400: {message}", "lower chat.max_tokens (prompt + max_tokens must fit in "
                         "server.max_model_len), or shorten the conversation", status)
    if status == 401:
        return ChatError(f"401: {message}", "the server wants its API key: set server.api_key_file "
                         "(or $QWEN_TUI_API_KEY) to the key it was started with", status)
    if status >= 500:
        return ChatError(f"HTTP {status}: {message}", "the server failed on this request: `qwen-tui logs` "
                         "shows why; the conversation is kept, send again", status)
    return ChatError(f"HTTP {status}: {message}", "see the server log", status)


def chat_body(model: str, messages: list[dict[str, str]], max_tokens: int, temperature: float,
              top_p: float | None = None) -> dict[str, Any]:
    """The request; ``continuous_usage_stats`` makes vLLM put the token count on every chunk."""
    body = {"model": model, "messages": messages, "stream": True, "max_tokens": max_tokens,
            "temperature": temperature,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    if top_p is not None:
        body["top_p"] = top_p
    return body


def why(e: Exception) -> str:
    """An exception in words, never empty: httpx's ReadError and RemoteProtocolError often carry no
    text, and "cut mid-reply: " with nothing after it reads as a message cut short."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else f"{type(e).__name__}, no detail given"


def connect_error(base_url: str, e: Exception) -> ChatError:
    return ChatError(f"cannot connect to {base_url} ({why(e)})",
                     "start the server (key s, or `qwen-tui serve`) and wait for READY")


def cut_error(e: Exception) -> ChatError:
    return ChatError(f"the connection was cut mid-reply ({why(e)})",
                     "the server may have died or been stopped: check its state and log")


def stuck_error(seconds: float, e: Exception) -> ChatError:
    return ChatError(f"no reply for {seconds:.0f} s ({type(e).__name__}): the server may be stuck",
                     "see the server log; `qwen-tui status` says whether it is still ready")


def explain_transport_error(base_url: str, e: httpx.TransportError) -> ChatError | None:
    """A refused connection or a stream cut short, explained; None for other transport errors."""
    if isinstance(e, httpx.ConnectError):
        return connect_error(base_url, e)
    if isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError)):
        return cut_error(e)
    return None


STREAM_TIMEOUT = httpx.Timeout(connect=5.0, read=None, write=30.0, pool=5.0)


def new_client(api_key: str | None = None, transport: httpx.AsyncBaseTransport | None = None,
               timeout: httpx.Timeout = STREAM_TIMEOUT) -> httpx.AsyncClient:
    """A client to keep for many requests (the chat tab holds one; the caller closes it)."""
    from backend.httpclient import async_client  # httpx only once a request is made: start-up

    return async_client(api_key=api_key, timeout=timeout, transport=transport)


async def stream_chat(base_url: str, model: str, messages: list[dict[str, str]], *,
                      max_tokens: int = CHAT["max_tokens"].default,
                      temperature: float = CHAT["temperature"].default, top_p: float | None = None,
                      api_key: str | None = None,
                      result: ChatResult | None = None,
                      transport: httpx.AsyncBaseTransport | None = None,
                      extra: dict[str, Any] | None = None,
                      client: httpx.AsyncClient | None = None) -> AsyncIterator[Delta]:
    """Yield text deltas; fill `result` (pass one in to read the figures afterwards).

    `extra` adds fields to the request body (e.g. vLLM's ignore_eos); `client` reuses a caller's
    connection pool (new_client(); the caller closes it) instead of opening one for this request.
    The clock starts when the request is sent, after the client and the request are built.
    """
    result = result if result is not None else ChatResult()
    body = {**chat_body(model, messages, max_tokens, temperature, top_p), **(extra or {})}
    start = time.perf_counter()
    try:
        async with contextlib.AsyncExitStack() as stack:
            if client is None:
                client = await stack.enter_async_context(new_client(api_key, transport))
                key_headers: dict[str, str] = {}
            else:
                from backend.httpclient import headers as auth_headers  # httpx only once a request is made: start-up

                key_headers = auth_headers(api_key)
            request = client.build_request("POST", base_url.rstrip("/") + "/v1/chat/completions",
                                           json=body, headers=key_headers)
            start = time.perf_counter()
            resp = await client.send(request, stream=True)
            stack.push_async_callback(resp.aclose)
            if resp.status_code >= 400:
                text = (await resp.aread()).decode("utf-8", "replace")
                raise explain_http_error(resp.status_code, text, model)
            async for line in _sse_lines(resp):
                delta = handle_line(line, result, start)
                if delta is not None:
                    yield delta
    except httpx.TransportError as e:
        explained = explain_transport_error(base_url, e)
        if explained is None:
            raise
        raise explained from None
    finally:
        result.total_s = time.perf_counter() - start


async def _sse_lines(resp: httpx.Response) -> AsyncIterator[str]:
    """The stream's `data:` lines, split from the raw bytes as they arrive (no per-line decoder)."""
    buf = b""
    async for chunk in resp.aiter_bytes():
        buf += chunk
        if b"\n" not in chunk:
            continue
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            if raw.startswith(b"data:"):
                yield raw.decode("utf-8", "replace")
    if buf.startswith(b"data:"):
        yield buf.decode("utf-8", "replace")


def handle_line(line: str, result: ChatResult, start: float) -> Delta | None:
    """One SSE line of a streamed reply into `result` (times from `start`); the text delta, if any."""
    line = line.strip()
    if not line or line.startswith(":") or not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return None
    now = time.perf_counter() - start
    try:
        chunk = json.loads(payload)
    except ValueError:
        raise ChatError(f"malformed chunk from the server: {payload[:120]!r}", "see the server log") from None
    if not isinstance(chunk, dict):
        raise ChatError(f"malformed chunk from the server: {payload[:120]!r}", "see the server log")
    if "error" in chunk:
        err = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
        raise ChatError(f"server error mid-stream: {err.get('message')}", "see the server log")
    result.model = chunk.get("model", result.model)
    choices = chunk.get("choices") or []
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
        done = usage.get("completion_tokens")
        if isinstance(done, int):
            if choices and done > (result.completion_tokens or 0):
                result.arrivals.append((now, done))
            result.completion_tokens = done
    if not choices:
        return None
    result.chunk_times.append(now)
    if result.ttft_s is None:
        result.ttft_s = now  # vLLM sends its first chunk once the first token exists
    out = None
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason"):
            result.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        text = delta.get("content") or ""
        reasoning = delta.get("reasoning") or delta.get("reasoning_content") or ""
        if (text or reasoning) and out is None:
            result.chunks += 1
            result.text += text
            out = Delta(text, reasoning)
    return out
