"""Streaming chat against the local OpenAI-compatible endpoint, with the figures people watch.

Time to first token is measured from sending the request to the first non-empty content delta;
decode tokens/s is completion tokens after the first, over the time after the first token.
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


class ChatError(Exception):
    """A request that failed, with what to do about it."""

    def __init__(self, message: str, fix: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.message, self.fix, self.status = message, fix, status


@dataclass
class Delta:
    text: str
    reasoning: str = ""


@dataclass
class ChatResult:
    text: str = ""
    model: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    total_s: float = 0.0
    chunks: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float | None:
        """Decode rate: tokens after the first over the time after the first token."""
        n = self.completion_tokens if self.completion_tokens is not None else self.chunks
        if self.ttft_s is None or n is None or n < 2:
            return None
        decode = self.total_s - self.ttft_s
        return (n - 1) / decode if decode > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "model": self.model, "finish_reason": self.finish_reason,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "ttft_s": self.ttft_s, "total_s": self.total_s, "tokens_per_s": self.tokens_per_s}


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


def chat_body(model: str, messages: list[dict[str, str]], max_tokens: int, temperature: float) -> dict[str, Any]:
    return {"model": model, "messages": messages, "stream": True, "max_tokens": max_tokens,
            "temperature": temperature, "stream_options": {"include_usage": True}}


def explain_transport_error(base_url: str, e: httpx.TransportError) -> ChatError | None:
    """A refused connection or a stream cut short, explained; None for other transport errors."""
    if isinstance(e, httpx.ConnectError):
        return ChatError(f"cannot connect to {base_url}: {e}",
                         "start the server (key s, or `qwen-tui serve`) and wait for READY")
    if isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError)):
        return ChatError(f"the connection was cut mid-reply: {e}",
                         "the server may have died: check its state and log")
    return None


async def stream_chat(base_url: str, model: str, messages: list[dict[str, str]], *, max_tokens: int = 256,
                      temperature: float = 0.7, api_key: str | None = None,
                      result: ChatResult | None = None,
                      transport: httpx.AsyncBaseTransport | None = None,
                      extra: dict[str, Any] | None = None,
                      client: httpx.AsyncClient | None = None) -> AsyncIterator[Delta]:
    """Yield content deltas; fill `result` (pass one in to read the figures afterwards).

    `extra` adds fields to the request body (e.g. vLLM's ignore_eos); `client` reuses a caller's
    connection pool (the load test) instead of opening one per request; the caller closes it.
    """
    result = result if result is not None else ChatResult()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = httpx.Timeout(connect=5.0, read=None, write=30.0, pool=5.0)
    body = {**chat_body(model, messages, max_tokens, temperature), **(extra or {})}
    start = time.perf_counter()
    try:
        async with contextlib.AsyncExitStack() as stack:
            if client is None:
                client = await stack.enter_async_context(httpx.AsyncClient(
                    timeout=timeout, trust_env=False, transport=transport))
            async with client.stream("POST", base_url.rstrip("/") + "/v1/chat/completions",
                                     json=body, headers=headers) as resp:
                if resp.status_code >= 400:
                    text = (await resp.aread()).decode("utf-8", "replace")
                    raise explain_http_error(resp.status_code, text, model)
                async for line in resp.aiter_lines():
                    delta = _handle_line(line, result, start)
                    if delta is not None:
                        yield delta
    except httpx.TransportError as e:
        explained = explain_transport_error(base_url, e)
        if explained is None:
            raise
        raise explained from None
    finally:
        result.total_s = time.perf_counter() - start


def _handle_line(line: str, result: ChatResult, start: float) -> Delta | None:
    line = line.strip()
    if not line or line.startswith(":") or not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return None
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
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
        result.completion_tokens = usage.get("completion_tokens", result.completion_tokens)
    for choice in chunk.get("choices") or []:
        if choice.get("finish_reason"):
            result.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        text = delta.get("content") or ""
        reasoning = delta.get("reasoning") or delta.get("reasoning_content") or ""
        if text or reasoning:
            if result.ttft_s is None:
                result.ttft_s = time.perf_counter() - start
            result.chunks += 1
            result.text += text
            return Delta(text, reasoning)
    return None
