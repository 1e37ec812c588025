"""The load test's aiohttp path (backend/bench/loadstream.py) against a real socket: the fault server of
tests/helpers/fault_server.py (NOT vLLM) streams, cuts, sends a malformed chunk or an error status; a
closed port refuses. Each must end as the chat's httpx path ends: figures filled, or a ChatError with
a fix, never a raw aiohttp exception."""

from __future__ import annotations

import asyncio
import socket

import pytest

from backend.bench.loadtest import REQUEST_EXTRA, aiohttp_send, make_request_fn, stream_session
from backend.chat.stream import ChatError, ChatResult
from tests.helpers.fault_server import FaultServer


def run(base_url: str, script: list | None = None, api_key: str | None = None):
    async def go():
        async with stream_session(4, api_key, None) as session:
            send = aiohttp_send(session, base_url, "qwen-tui-demo")
            res = ChatResult()
            err = None
            try:
                await send([{"role": "user", "content": "hi"}], 16, res)
            except ChatError as e:
                err = e
            return res, err

    return asyncio.run(go())


def test_a_streamed_reply_fills_the_figures_and_sends_the_bench_body():
    with FaultServer() as srv:
        srv.httpd.reply = ["Hello", " there", " again"]
        res, err = run(srv.base_url)
        body = srv.bodies[0]
    assert err is None and res.text == "Hello there again" and res.chunks == 3
    assert res.ttft_s is not None and res.ttft_s <= res.total_s and len(res.chunk_times) == 3
    # the body vllm bench serve sends: usage once at the end, EOS ignored
    assert body["stream_options"] == REQUEST_EXTRA["stream_options"] and body["ignore_eos"] is True
    assert body["max_tokens"] == 16 and body["temperature"] == 0.0 and body["stream"] is True


@pytest.mark.parametrize("script, words", [(["cut"], "cut mid-reply"), (["malformed"], "malformed chunk"),
                                           ([404], "does not exist"), ([400], "maximum context length")])
def test_faults_end_as_the_chats_errors_with_a_fix(script, words):
    with FaultServer() as srv:
        srv.script = script
        _res, err = run(srv.base_url)
    assert err is not None and words in err.message and err.fix, err


def test_a_connection_closed_before_any_answer_is_sent_once_more_and_a_second_drop_is_an_error():
    with FaultServer() as srv:
        srv.httpd.reply = ["Hello", " there"]
        srv.script = ["drop"]
        res, err = run(srv.base_url)
        assert err is None and res.text == "Hello there" and len(srv.bodies) == 2  # one drop, one reply
        srv.script = ["drop", "drop"]
        _res, err = run(srv.base_url)
        assert err is not None and "cut" in err.message and err.fix and len(srv.bodies) == 4  # never a third send


def test_a_cut_after_the_answer_began_is_never_sent_again():
    with FaultServer() as srv:
        srv.script = ["cut"]
        _res, err = run(srv.base_url)
        assert err is not None and "cut mid-reply" in err.message and len(srv.bodies) == 1


def test_a_closed_port_says_to_start_the_server():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    _res, err = run(f"http://127.0.0.1:{port}")
    assert err is not None and err.message.startswith(f"cannot connect to http://127.0.0.1:{port}")
    assert "start the server" in err.fix


def test_the_api_key_goes_with_every_request():
    seen = []
    with FaultServer() as srv:
        orig = srv.httpd.RequestHandlerClass.do_POST

        def spy(handler):
            seen.append(handler.headers.get("Authorization"))
            return orig(handler)

        srv.httpd.RequestHandlerClass.do_POST = spy
        try:
            run(srv.base_url, api_key="sk-test")
        finally:
            srv.httpd.RequestHandlerClass.do_POST = orig
    assert seen == ["Bearer sk-test"]


def test_a_failed_request_counts_as_failed_with_its_fix():
    async def go(base_url):
        async with stream_session(2, None, None) as session:
            one = make_request_fn(aiohttp_send(session, base_url, "qwen-tui-demo"), 3, 8, "t-")
            return await one(0)

    with FaultServer() as srv:
        srv.script = ["cut"]
        r = asyncio.run(go(srv.base_url))
    assert not r.ok and "cut mid-reply" in r.error and r.fix
