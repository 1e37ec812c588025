"""Chat client. The real server is exercised in test_e2e.py; this FAKE transport (httpx.MockTransport)
only produces what the real server cannot be made to: a malformed chunk and a connection cut."""

import httpx
import pytest

from backend.chat.stream import ChatError, ChatResult, explain_http_error, stream_chat


def sse(*chunks: str) -> bytes:
    return "".join(f"data: {c}\n\n" for c in chunks).encode()


async def collect(transport, result=None):
    out = []
    async for d in stream_chat("http://127.0.0.1:9", "m", [{"role": "user", "content": "hi"}],
                               transport=transport, result=result):
        out.append(d.text)
    return out


async def test_figures_from_a_stream():
    body = sse('{"model":"m","choices":[{"delta":{"role":"assistant","content":""}}]}',
               '{"choices":[{"delta":{"content":"Hel"}}]}',
               '{"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}',
               '{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}', "[DONE]")
    r = ChatResult()
    assert await collect(httpx.MockTransport(lambda req: httpx.Response(200, content=body)), r) == ["Hel", "lo"]
    assert r.text == "Hello" and r.finish_reason == "stop" and r.completion_tokens == 2
    assert r.ttft_s is not None and r.ttft_s <= r.total_s


async def test_malformed_chunk_is_a_clear_error():
    body = sse('{"choices":[{"delta":{"content":"a"}}]}', "{not json")
    with pytest.raises(ChatError, match="malformed chunk"):
        await collect(httpx.MockTransport(lambda req: httpx.Response(200, content=body)))


async def test_connection_cut_mid_stream():
    class Cut(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield sse('{"choices":[{"delta":{"content":"a"}}]}')
            raise httpx.RemoteProtocolError("peer closed connection")

    with pytest.raises(ChatError, match="cut mid-reply"):
        await collect(httpx.MockTransport(lambda req: httpx.Response(200, stream=Cut())))


async def test_dead_server_says_start_it():
    with pytest.raises(ChatError) as e:
        async for _ in stream_chat("http://127.0.0.1:9", "m", [{"role": "user", "content": "x"}]):
            pass
    assert "cannot connect" in e.value.message and "start the server" in e.value.fix


def test_http_errors_explained():
    e = explain_http_error(404, '{"error":{"message":"The model `nope` does not exist. '
                                'Valid aliases: qwen2.5-14b."}}', "nope")
    assert "qwen2.5-14b" in e.fix and "served_model_name" in e.fix
    e = explain_http_error(400, '{"error":{"message":"max_tokens=9000 cannot be greater than '
                                'max_model_len=8192."}}', "m")
    assert "chat.max_tokens" in e.fix


# -- honest figures (issue 16 / 20): a SCRIPTED FAKE stream with timed chunks ------------------------
import asyncio  # noqa: E402
import json as _json  # noqa: E402


def chunk(content=None, role=None, tokens=None, finish=None) -> str:
    delta = {k: v for k, v in (("role", role), ("content", content)) if v is not None}
    c = {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if tokens is not None:
        c["usage"] = {"prompt_tokens": 7, "completion_tokens": tokens, "total_tokens": 7 + tokens}
    return _json.dumps(c)


class FakeTimedStream(httpx.AsyncByteStream):
    """A FAKE server stream: (seconds to wait, bytes) steps, like a server emitting tokens over time."""

    def __init__(self, steps):
        self.steps = steps

    async def __aiter__(self):
        for wait, data in self.steps:
            await asyncio.sleep(wait)
            yield data


def fake_transport(steps, seen=None):
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(_json.loads(request.content))
        return httpx.Response(200, stream=FakeTimedStream(steps))
    return httpx.MockTransport(handler)


async def test_ttft_is_the_first_token_even_when_its_text_is_empty():
    """Tokens whose ids decode to nothing: the role chunk at the first token, empty deltas, text late.
    Before: TTFT at the first non-empty text (0.3 s here) and a rate from text chunks."""
    steps = [(0.05, sse(chunk("", role="assistant", tokens=0)))]
    steps += [(0.02, sse(chunk("", tokens=k))) for k in range(1, 12)]
    steps += [(0.02, sse(chunk("hi", tokens=12, finish="length"))),
              (0.0, sse('{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":12}}', "[DONE]"))]
    seen, r = [], ChatResult()
    assert await collect(fake_transport(steps, seen), r) == ["hi"]
    assert seen[0]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert 0.04 <= r.ttft_s < 0.15, r.ttft_s
    assert r.completion_tokens == 12 and r.tokens == 12 and not r.burst
    assert 30 < r.decode_tokens_per_s < 60  # 11 tokens over ~0.24 s


async def test_tokens_that_arrive_together_are_a_burst_not_a_rate():
    from backend.chat.conversation import figures_line, measured_decode_rate

    body = sse(chunk("", role="assistant", tokens=0), *[chunk("x", tokens=k) for k in range(1, 257)],
               "[DONE]")
    r = ChatResult()
    await collect(fake_transport([(0.01, body)]), r)
    assert r.tokens == 256 and r.burst and r.decode_tokens_per_s is None
    assert r.tokens_per_s is None or r.tokens_per_s > 1000  # the raw figure would be absurd
    line = figures_line(r, 162)
    assert "burst" in line and "tok/s (" not in line.split("burst")[0]
    assert measured_decode_rate(r, 162) is None


def test_a_rate_above_the_ceiling_is_marked_and_not_taken_as_decode():
    from backend.chat.conversation import figures_line, measured_decode_rate

    times = [0.1 + 0.001 * k for k in range(200)]  # 1,000 tok/s with measurable gaps
    r = ChatResult(completion_tokens=200, ttft_s=0.1, total_s=0.3, chunk_times=times)
    assert not r.burst and r.decode_tokens_per_s > 900
    assert "above the ceiling" in figures_line(r, 162)
    assert measured_decode_rate(r, 162) is None and measured_decode_rate(r, 2000) > 900


async def test_ttft_runs_from_the_send_not_from_building_the_client(monkeypatch):
    """Building a client (TLS context) once cost ~34 ms inside the TTFT; the clock starts at the send."""
    import backend.chat.stream as chat

    real = chat.new_client

    def slow_client(*a, **kw):
        import time
        time.sleep(0.2)
        return real(*a, **kw)

    monkeypatch.setattr(chat, "new_client", slow_client)
    r = ChatResult()
    await collect(fake_transport([(0.01, sse(chunk("a", role="assistant", tokens=1), "[DONE]"))]), r)
    assert r.ttft_s < 0.15, r.ttft_s


def test_tokens_in_pairs_are_a_rate_and_all_at_once_a_burst():
    """Issue 28: at concurrency 1 on the demo, tokens that reach the client two by two (the pooled
    ITL p50 near 0) still have a per-request rate; only most tokens at one moment are a burst."""
    from backend.chat.stream import ChatResult

    pairs = ChatResult(completion_tokens=20, ttft_s=0.1,
                       chunk_times=[0.1 + (k // 2) * 0.018 + (k % 2) * 0.0001 for k in range(20)])
    assert not pairs.burst and pairs.decode_tokens_per_s is not None
    at_once = ChatResult(completion_tokens=20, ttft_s=0.1, chunk_times=[0.1] + [0.5 + k * 1e-5 for k in range(19)])
    assert at_once.burst and at_once.decode_tokens_per_s is None
