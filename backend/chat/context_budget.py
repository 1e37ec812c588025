"""The context budget: does the next request fit in the server's max_model_len?

vLLM refuses (HTTP 400) a request whose prompt tokens + max_tokens exceed max_model_len. The
console counts the prompt before sending: exactly with vLLM's POST /tokenize (the chat template
applied, as the request will be), or from the last reply's usage (prompt + completion tokens of the
history) plus an upper bound for the new text. A request that would not fit is never sent; the
way out is to drop the oldest exchanges from the context or lower max_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

# an upper bound for text not yet counted: a byte-level BPE token is at least one byte, and each
# message adds its template tokens (<|im_start|>role\n ... <|im_end|>\n: 5 for ChatML)
TEMPLATE_TOKENS_PER_MESSAGE = 8


def upper_bound(text: str) -> int:
    return len(text.encode("utf-8")) + TEMPLATE_TOKENS_PER_MESSAGE


@dataclass
class Budget:
    prompt_tokens: int | None  # the whole request's prompt (history + new message)
    max_tokens: int
    max_model_len: int | None
    exact: bool = False  # counted by /tokenize (False: from usage, or an upper bound)

    @property
    def fits(self) -> bool | None:
        """None when it cannot be known (no count, or no max_model_len)."""
        if self.prompt_tokens is None or not self.max_model_len:
            return None
        return self.prompt_tokens + self.max_tokens <= self.max_model_len

    @property
    def max_tokens_that_fit(self) -> int:
        """The largest max_tokens that fits with this prompt (0: none does)."""
        if self.prompt_tokens is None or not self.max_model_len:
            return self.max_tokens
        return max(0, self.max_model_len - self.prompt_tokens)

    def text(self) -> str:
        """"context 312 / 2048 tokens (+512 reply)" for the line under the input."""
        if not self.max_model_len:
            known = f"{self.prompt_tokens}" if self.prompt_tokens is not None else "?"
            return f"context {known} tokens (max_model_len not known yet)"
        count = "?" if self.prompt_tokens is None else f"{'' if self.exact else '≤ '}{self.prompt_tokens}"
        used = (self.prompt_tokens or 0) + self.max_tokens
        pct = f" · {100 * used / self.max_model_len:.0f}% with the reply" if self.prompt_tokens is not None else ""
        return f"context {count} / {self.max_model_len} tokens (+{self.max_tokens} max reply){pct}"

    def refusal(self) -> str:
        return (f"not sent: {self.prompt_tokens} prompt tokens + max_tokens {self.max_tokens} = "
                f"{(self.prompt_tokens or 0) + self.max_tokens} > max_model_len {self.max_model_len}; "
                "vLLM would refuse it")


class TokenizeUnavailable(Exception):
    """The server has no usable /tokenize (not vLLM, an old one, or an error)."""


async def tokenize(client: httpx.AsyncClient, base_url: str, model: str, messages: list[dict[str, str]],
                   headers: dict[str, str] | None = None) -> tuple[int, int | None]:
    """(prompt tokens, max_model_len) from vLLM's /tokenize, with the chat template applied."""
    try:
        r = await client.post(base_url.rstrip("/") + "/tokenize", headers=headers or {},
                              json={"model": model, "messages": messages, "add_generation_prompt": True},
                              timeout=httpx.Timeout(10.0))
        if r.status_code != 200:
            raise TokenizeUnavailable(f"/tokenize answered {r.status_code}")
        data = r.json()
        count = int(data["count"])
        max_len = data.get("max_model_len")
        return count, int(max_len) if isinstance(max_len, int) and max_len > 0 else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
        raise TokenizeUnavailable(str(e) or type(e).__name__) from None


async def max_model_len_from_models(client: httpx.AsyncClient, base_url: str, model: str,
                                    headers: dict[str, str] | None = None) -> int | None:
    """GET /v1/models: the served model's max_model_len (None when not said)."""
    try:
        r = await client.get(base_url.rstrip("/") + "/v1/models", headers=headers or {},
                             timeout=httpx.Timeout(10.0))
        cards = r.json().get("data") or []
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    for card in cards:
        if isinstance(card, dict) and card.get("id") == model and isinstance(card.get("max_model_len"), int):
            return int(card["max_model_len"])
    return None


def estimate(known_history: int | None, history_at: int, messages: list[dict[str, str]]) -> int | None:
    """An upper bound from the server's last usage: `known_history` tokens covered the first
    `history_at` messages; the rest are bounded by their bytes."""
    if known_history is None:
        return None
    return known_history + sum(upper_bound(m["content"]) for m in messages[history_at:])


async def count(client: httpx.AsyncClient, base_url: str, model: str, messages: list[dict[str, str]],
                max_tokens: int, *, max_model_len: int | None = None, known_history: int | None = None,
                history_at: int = 0, headers: dict[str, str] | None = None) -> Budget:
    """The budget of sending `messages`: skips /tokenize when the usage-based upper bound already
    fits (cheap and certain), counts exactly otherwise, and falls back to the bound."""
    bound = estimate(known_history, history_at, messages)
    if bound is not None and max_model_len and bound + max_tokens <= max_model_len:
        return Budget(bound, max_tokens, max_model_len, exact=False)
    try:
        n, server_len = await tokenize(client, base_url, model, messages, headers)
        return Budget(n, max_tokens, server_len or max_model_len, exact=True)
    except TokenizeUnavailable:
        if not max_model_len:
            max_model_len = await max_model_len_from_models(client, base_url, model, headers)
        return Budget(bound, max_tokens, max_model_len, exact=False)


async def exchanges_to_drop(client: httpx.AsyncClient, base_url: str, model: str,
                            system: list[dict[str, str]], exchanges: list[list[dict[str, str]]],
                            new: dict[str, str], max_tokens: int, max_model_len: int,
                            headers: dict[str, str] | None = None) -> int | None:
    """The fewest oldest exchanges to leave out so the request fits (binary search with
    /tokenize); None when even the new message alone does not fit, or nothing can be counted."""

    async def fits(k: int) -> bool:
        msgs = system + [m for ex in exchanges[k:] for m in ex] + [new]
        n, _ = await tokenize(client, base_url, model, msgs, headers)
        return n + max_tokens <= max_model_len

    try:
        if not await fits(len(exchanges)):
            return None
        lo, hi = 0, len(exchanges)  # fits(hi) holds
        while lo < hi:
            mid = (lo + hi) // 2
            if await fits(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo
    except TokenizeUnavailable:
        return None


def split_exchanges(turns: list[dict[str, Any]]) -> list[list[dict[str, str]]]:
    """Turns (role/content) grouped as exchanges: each user message with the replies after it."""
    out: list[list[dict[str, str]]] = []
    for t in turns:
        msg = {"role": t["role"], "content": t["content"]}
        if t["role"] == "user" or not out:
            out.append([msg])
        else:
            out[-1].append(msg)
    return out
