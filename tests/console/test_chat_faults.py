"""Chat faults from a fault-injecting local server (tests/fault_server.py, not vLLM): a cut
stream, a malformed chunk, 400/404/500. Each gives a message with its fix, and the conversation
is kept: the next message is sent with the turns before the fault."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from backend.chat.stream import ChatError, stream_chat
from backend.server.client import Poll
from tests.helpers.console import app_with, wait_until
from tests.helpers.fault_server import FaultServer
from tui.widgets.chat_pane import ChatPane

FIXES = {"cut": ("cut mid-reply", "server may have died"), "malformed": ("malformed chunk", "server log"),
         400: ("400", "chat.max_tokens"), 404: ("404", "served_model_name"), 500: ("HTTP 500", "qwen-tui logs")}


@pytest.mark.parametrize("fault", list(FIXES))
async def test_each_fault_is_explained_with_its_fix(fault):
    with FaultServer() as srv:
        srv.script = [fault]
        with pytest.raises(ChatError) as e:
            async for _ in stream_chat(srv.base_url, "m", [{"role": "user", "content": "x"}]):
                pass
    what, fix = FIXES[fault]
    assert what in e.value.message and fix in e.value.fix


async def test_the_console_keeps_the_conversation_through_every_fault(qhome):
    with FaultServer() as srv:
        srv.script = ["ok", "cut", "malformed", 400, 404, 500, "ok"]
        host, port = srv.base_url.rsplit(":", 1)
        state = {"state": "ready", "base_url": srv.base_url, "served_model_name": "qwen-tui-demo"}
        app, _ = app_with([Poll(state=state)], qhome, f"server.port={port}")
        async with app.run_test(size=(150, 45)) as pilot:
            assert await wait_until(pilot, lambda: app.screen.chat_endpoint is not None)
            errors = lambda: [str(w.render()) for w in pane.query(".error").results(Static)]  # noqa: E731
            await pilot.press("c", *"first", "enter")
            pane = app.screen.query_one(ChatPane)
            assert await wait_until(pilot, lambda: len(pane.conversation.turns) == 2 and not pane.streaming)
            for n, fault in enumerate(["cut", "malformed", 400, 404, 500], 1):
                await pilot.press(*f"try{n}", "enter")
                assert await wait_until(pilot, lambda n=n: len(errors()) == n and not pane.streaming, tries=100)
                what, fix = FIXES[fault]
                assert what in errors()[-1] and "fix: " in errors()[-1] and fix in errors()[-1]
                assert len(pane.conversation.turns) == 2  # kept, and the failed turn not recorded as a reply
            await pilot.press(*"last", "enter")
            assert await wait_until(pilot, lambda: len(pane.conversation.turns) == 4 and not pane.streaming)
        sent = srv.bodies[-1]["messages"]
        assert [m["content"] for m in sent if m["role"] == "user"] == ["first", "last"]
        assert any(m["role"] == "assistant" and m["content"] == "Hello there" for m in sent)
