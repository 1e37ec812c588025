"""Chat client. The real server is exercised in test_e2e.py; this FAKE transport (httpx.MockTransport)
only produces what the real server cannot be made to: a malformed chunk and a connection cut."""

import httpx
import pytest

from backend.chat import ChatError, ChatResult, explain_http_error, stream_chat


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
    e = explain_http_error(404, '{"error":{"message":"The model `nope` does not exist. Valid aliases: qwen2.5-14b."}}', "nope")
    assert "qwen2.5-14b" in e.fix and "served_model_name" in e.fix
    e = explain_http_error(400, '{"error":{"message":"max_tokens=9000 cannot be greater than max_model_len=8192."}}', "m")
    assert "chat.max_tokens" in e.fix
