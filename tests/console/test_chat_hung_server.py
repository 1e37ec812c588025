"""A chat against a server that accepts the connection and then says nothing (its process
SIGSTOPped: the fault server of tests/helpers/fault_server.py in its own process, not vLLM): the
chat counts "waiting for the first token… N s"; when the server is then killed, the message that
ends the wait is complete (never "cut mid-reply:" with nothing after the colon)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
from textual.widgets import Static

from backend.chat.stream import connect_error, cut_error
from backend.server.client import Poll
from tests.helpers import ROOT
from tests.helpers.console import app_with, wait_until
from tui.widgets.chat_pane import ChatPane
from tui.widgets.waiting_line import WaitingLine


def test_a_cut_with_no_detail_is_still_a_whole_sentence():
    for err in (cut_error(httpx.ReadError("")), cut_error(httpx.RemoteProtocolError("")),
                connect_error("http://127.0.0.1:1", httpx.ConnectError(""))):
        assert not err.message.rstrip().endswith(":"), err.message
        assert "no detail given" in err.message and err.fix
    said = cut_error(httpx.RemoteProtocolError("Server disconnected")).message
    assert said == "the connection was cut mid-reply (RemoteProtocolError: Server disconnected)"


async def test_a_stopped_server_shows_the_wait_then_a_complete_message(qhome):
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.fault_server"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        base_url = proc.stdout.readline().strip()
        port = base_url.rsplit(":", 1)[1]
        os.kill(proc.pid, signal.SIGSTOP)  # the kernel still accepts connections; nothing answers
        state = {"state": "ready", "base_url": base_url, "served_model_name": "qwen-tui-demo"}
        app, _ = app_with([Poll(state=state)], qhome, f"server.port={port}")
        async with app.run_test(size=(80, 24)) as pilot:
            assert await wait_until(pilot, lambda: app.screen.chat_endpoint is not None)
            await pilot.press("c", *"hello", "enter")
            pane = app.screen.query_one(ChatPane)
            waiting = lambda: [str(w.render()) for w in pane.query(WaitingLine)]  # noqa: E731
            assert await wait_until(pilot, lambda: any("first token… 2 s" in t for t in waiting()), tries=100), \
                waiting()
            assert pane.streaming
            proc.kill()  # a stopped process dies too: its sockets close under the waiting client
            proc.wait()
            errors = lambda: [str(w.render()) for w in pane.query(".error").results(Static)]  # noqa: E731
            assert await wait_until(pilot, lambda: bool(errors()) and not pane.streaming, tries=600), waiting()
            [said] = errors()
            head = said.split("\n")[0]
            assert not head.rstrip().endswith(":") and "(" in head and "fix: " in said, said
            assert not waiting(), "the waiting line goes when the wait ends"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_the_context_line_counts_a_reply_cut_by_esc(qhome):
    """The fault server's "slow" reply carries vLLM's per-chunk usage; esc cuts it after 20 tokens or
    more: the cut reply stays in the context, and the line under the input counts it."""
    import re

    from tests.helpers.fault_server import FaultServer

    with FaultServer() as srv:
        srv.script = ["ok", "slow"]
        port = srv.base_url.rsplit(":", 1)[1]
        state = {"state": "ready", "base_url": srv.base_url, "served_model_name": "qwen-tui-demo"}
        app, _ = app_with([Poll(state=state)], qhome, f"server.port={port}")
        async with app.run_test(size=(80, 24)) as pilot:
            assert await wait_until(pilot, lambda: app.screen.chat_endpoint is not None)
            line = lambda: str(pane.query_one("#chat-budget").render())  # noqa: E731
            counted = lambda: int(re.search(r"context ≤? ?(\d+) /", line()).group(1))  # noqa: E731
            await pilot.press("c", *"first", "enter")
            pane = app.screen.query_one(ChatPane)
            assert await wait_until(pilot, lambda: len(pane.conversation.turns) == 2 and not pane.streaming)
            before = counted()
            await pilot.press(*"second", "enter")
            assert await wait_until(pilot, lambda: pane._reply is not None and pane._reply.source.count("word") >= 20,
                                    tries=200)
            await pilot.press("escape")
            assert await wait_until(pilot, lambda: not pane.streaming, tries=100)
            assert len(pane.conversation.turns) == 4  # the cut reply is kept
            assert await wait_until(pilot, lambda: counted() >= before + 20), (before, line())
