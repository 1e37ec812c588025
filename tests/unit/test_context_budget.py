"""backend.chat.context_budget: the prompt counted (vLLM's /tokenize, or the last usage and an upper bound)
against max_model_len; the fewest oldest exchanges to drop."""

from __future__ import annotations

import json

import httpx

from backend.chat import context_budget as cb


def tokenizer(max_len: int = 100, per_message: int = 10, status: int = 200):
    """A /tokenize that counts per_message tokens per message; records what it was asked."""
    asked: list[dict] = []

    def handle(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": max_len}]})
        body = json.loads(req.content)
        asked.append(body)
        if status != 200:
            return httpx.Response(status, json={"error": "no"})
        return httpx.Response(200, json={"count": per_message * len(body["messages"]), "max_model_len": max_len,
                                         "tokens": []})

    return httpx.AsyncClient(transport=httpx.MockTransport(handle)), asked


def msgs(n: int) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(n)]


async def test_exact_count_with_tokenize():
    client, asked = tokenizer()
    b = await cb.count(client, "http://x", "m", msgs(3), max_tokens=50)
    assert (b.prompt_tokens, b.max_model_len, b.exact, b.fits) == (30, 100, True, True)
    assert asked[0]["add_generation_prompt"] is True and asked[0]["model"] == "m"
    b = await cb.count(client, "http://x", "m", msgs(7), max_tokens=50)
    assert b.fits is False and b.max_tokens_that_fit == 30
    assert "70 prompt tokens + max_tokens 50 = 120 > max_model_len 100" in b.refusal()
    assert "context 70 / 100 tokens (+50 max reply)" in b.text()


async def test_a_sure_fit_from_usage_skips_tokenize():
    client, asked = tokenizer(max_len=1000)
    b = await cb.count(client, "http://x", "m", msgs(3), max_tokens=50, max_model_len=1000,
                       known_history=40, history_at=2)
    assert asked == [] and b.exact is False and b.fits
    assert b.prompt_tokens == 40 + cb.upper_bound("m2") and "≤ " in b.text()
    # near the limit the bound is not enough: it counts exactly
    b = await cb.count(client, "http://x", "m", msgs(3), max_tokens=990, max_model_len=1000,
                       known_history=40, history_at=2)
    assert len(asked) == 1 and b.exact and b.prompt_tokens == 30


async def test_without_tokenize_it_falls_back():
    client, _ = tokenizer(status=404)
    b = await cb.count(client, "http://x", "m", msgs(3), max_tokens=50, known_history=40, history_at=2)
    assert b.exact is False and b.max_model_len == 100  # from /v1/models
    b = await cb.count(client, "http://x", "m", msgs(3), max_tokens=50)
    assert b.prompt_tokens is None and b.fits is None


async def test_fewest_exchanges_to_drop():
    client, _ = tokenizer(max_len=100)
    turns = msgs(8)  # 4 exchanges of 2 messages: 80 tokens, + the new message 90
    ex = cb.split_exchanges(turns)
    assert len(ex) == 4
    new = {"role": "user", "content": "new"}
    # with max_tokens 40: need prompt <= 60, i.e. 1 system + 2 kept... system is 1 message
    k = await cb.exchanges_to_drop(client, "http://x", "m", [{"role": "system", "content": "s"}], ex, new, 40, 100)
    assert k == 2  # 1 + 4 + 1 = 6 messages = 60 tokens
    assert await cb.exchanges_to_drop(client, "http://x", "m", [], ex, new, 95, 100) is None
