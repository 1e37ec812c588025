"""backend/chat/session.py, the one send sequence of `qwen-tui chat` and the chat pane: count, (drop),
stream, usage, record, save; a refusal sends nothing, a failure records nothing, a cut is kept.
Against tests/helpers/fault_server.py (a local socket, not vLLM; the real server is in the e2e tier)."""

from __future__ import annotations

import asyncio

import pytest

from backend.chat.conversation import Conversation
from backend.chat.session import ChatSession, ContextRefused
from backend.chat.store import Store
from backend.chat.stream import ChatError
from backend.settings import load
from tests.helpers.fault_server import FaultServer


def session_for(srv: FaultServer, store: Store | None = None, conv: Conversation | None = None) -> ChatSession:
    port = srv.base_url.rsplit(":", 1)[1]
    settings = load(overrides=[f"server.port={port}", "server.served_model_name=qwen-tui-demo"])
    return ChatSession(settings, conv, store)


async def test_a_send_streams_records_and_saves_and_the_next_one_carries_the_history(qhome):
    store = Store()
    with FaultServer() as srv:
        s = session_for(srv, store, Conversation(title="notes"))
        deltas: list[str] = []
        counted = []
        reply = await s.send("first", deltas.append, on_budget=counted.append)
        assert deltas == ["Hello", " there"] and reply.result.text == "Hello there"
        assert [t["content"] for t in reply.new] == ["first", "Hello there"] and "TTFT" in reply.line
        assert counted == [reply.budget] and reply.budget.exact and reply.budget.max_model_len == 2048
        assert reply.unsaved == ""
        await s.send("second")
        assert [m["content"] for m in srv.bodies[-1]["messages"] if m["role"] != "system"] == \
            ["first", "Hello there", "second"]
        await s.aclose()
    saved = store.load(s.conversation.id)
    assert [t["content"] for t in saved.turns] == ["first", "Hello there", "second", "Hello there"]
    assert saved.server["served_as"] == "qwen-tui-demo" and saved.title == "notes"


async def test_without_a_store_nothing_is_saved(qhome):
    with FaultServer() as srv:
        s = session_for(srv)
        await s.send("hi")
        await s.aclose()
    assert Store().list() == [] and len(s.conversation.turns) == 2


async def test_a_request_that_would_not_fit_is_never_sent_unless_dropping_makes_it_fit(qhome):
    store = Store()
    with FaultServer() as srv:
        srv.httpd.max_model_len = 300
        s = session_for(srv, store, Conversation(title="long"))
        for q in ("one", "two", "three"):
            await s.send(q, max_tokens=250)
        sent = len(srv.bodies)
        with pytest.raises(ContextRefused) as refused:
            await s.send("four", max_tokens=290)
        assert len(srv.bodies) == sent and refused.value.drop and "> max_model_len 300" in str(refused.value)
        assert refused.value.budget.max_tokens_that_fit < 290
        reply = await s.send("four", max_tokens=260, drop_oldest=True)
        assert reply.notes and "left the oldest" in reply.notes[0]
        users = [m["content"] for m in srv.bodies[-1]["messages"] if m["role"] == "user"]
        assert users[-1] == "four" and "one" not in users
        await s.aclose()
    kept = store.load(s.conversation.id)
    assert [t["content"] for t in kept.turns if t["role"] == "user"] == ["one", "two", "three", "four"]
    assert kept.context_start > 0  # kept in the file, no longer sent


async def test_a_server_failure_records_nothing(qhome):
    store = Store()
    with FaultServer() as srv:
        srv.script = [500]
        s = session_for(srv, store)
        with pytest.raises(ChatError) as e:
            await s.send("x")
        assert "HTTP 500" in e.value.message and s.conversation.turns == [] and s.result is not None
        await s.aclose()
    assert store.list() == []


async def test_a_cancel_keeps_the_cut_reply_and_its_usage_counts_the_next_send(qhome):
    store = Store()
    with FaultServer() as srv:
        srv.script = ["slow"]
        s = session_for(srv, store)
        got: list[str] = []
        arrived = asyncio.Event()

        def delta(text: str) -> None:
            got.append(text)
            if len(got) >= 3:
                arrived.set()

        task = asyncio.create_task(s.send("tell me", delta))
        await asyncio.wait_for(arrived.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cut = s.last
        assert cut is not None and cut.cut and cut.new[1]["content"].startswith("word0 word1 word2")
        assert cut.new[1].get("cut") and s.conversation.turns == cut.new
        assert s.known == (cut.result.prompt_tokens + cut.result.completion_tokens, len(s.conversation.history()))
        tokenized = len(srv.httpd.tokenized)
        budget = await s.count("next")
        assert not budget.exact and len(srv.httpd.tokenized) == tokenized  # the usage bound fits: no /tokenize
        await s.aclose()
    assert store.load(s.conversation.id).turns[1].get("cut")
