"""Pilot tests of conversations in the chat tab against tests/fault_server.py (a local socket):
saved as they go and reopened with their figures (ctrl+o, or `o` on the transcript), rename,
delete after a `y`, export; ctrl+n keeps the old one; per-chat settings sent and saved; a message
that would not fit is not sent and the way out is offered; esc cuts a reply (kept, marked, the
stream closed); copy says which path it took. The real server's side is in the e2e tier."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

from textual.widgets import DataTable, Input, Label, Static

from backend.chat.store import Store
from backend.server.client import Poll
from tests.helpers.console import app_with, wait_until
from tests.helpers.fault_server import FaultServer
from tui.widgets.chat_pane import ChatPane
from tui.widgets.reply import ReplyView


def _app(srv, qhome, *overrides):
    port = srv.base_url.rsplit(":", 1)[1]
    state = {"state": "ready", "base_url": srv.base_url, "served_model_name": "qwen-tui-demo"}
    return app_with([Poll(state=state)], qhome, f"server.port={port}", *overrides)[0]


def _texts(pane, cls):
    return [str(w.render()) for w in pane.query(f".{cls}").results(Static)]


async def _ready(pilot, app):
    assert await wait_until(pilot, lambda: app.screen.chat_endpoint is not None)
    await pilot.press("c")
    pane = app.screen.query_one(ChatPane)
    return pane


@asynccontextmanager
async def _reply_streaming(qhome, seen):
    """(server, pilot, chat pane) with a reply from the fault server's slow script streaming: `seen`
    (word0, word1, …) already on the screen."""
    with FaultServer() as srv:
        srv.script = ["slow"]
        app = _app(srv, qhome)
        async with app.run_test(size=(150, 45)) as pilot:
            pane = await _ready(pilot, app)
            await pilot.press(*"long one", "enter")
            assert await wait_until(pilot, lambda: pane.query(ReplyView) and
                                    seen in pane.query(ReplyView).last().source, tries=100)
            yield srv, pilot, pane


async def _say(pilot, pane, text, replies):
    await pilot.press(*text, "enter")
    assert await wait_until(pilot, lambda: len(pane.conversation.replies()) == replies and not pane.streaming,
                            tries=100), _texts(pane, "error")


async def test_two_replies_saved_then_reopened_with_their_figures(qhome):
    with FaultServer() as srv:
        app = _app(srv, qhome)
        async with app.run_test(size=(150, 45)) as pilot:
            pane = await _ready(pilot, app)
            budget = lambda: str(pane.query_one("#chat-budget", Static).render())  # noqa: E731
            # counted once the server is seen: the system prompt alone (10 tokens on this server)
            assert await wait_until(pilot, lambda: "context 10 / 2048 tokens (+512 max reply)" in budget())
            await _say(pilot, pane, "first", 1)
            await _say(pilot, pane, "second", 2)
            conv_id = pane.conversation.id
            assert "context" in str(pane.query_one("#chat-budget", Static).render())
        saved = Store().load(conv_id)
        assert [t["content"] for t in saved.turns] == ["first", "Hello there", "second", "Hello there"]
        assert saved.model == "qwen-tui-demo" and saved.server["base_url"] == srv.base_url
        assert all("TTFT" in t["line"] for t in saved.replies())

        app = _app(srv, qhome)  # a new console: nothing shown until reopened
        async with app.run_test(size=(150, 45)) as pilot:
            pane = await _ready(pilot, app)
            assert pane.conversation.turns == []
            await pilot.press("up")  # onto the transcript: here `o` is a command, not text
            await pilot.press("o")
            table = app.screen.query_one(DataTable)
            assert await wait_until(pilot, lambda: table.row_count == 1)
            row = table.get_row_at(0)
            assert row[0] == "first" and row[2] == "qwen-tui-demo" and row[3] == "4"
            await pilot.press("enter")
            assert await wait_until(pilot, lambda: len(pane.conversation.turns) == 4)
            assert pane.conversation.id == conv_id
            assert [r.source for r in pane.query(ReplyView).results(ReplyView)] == ["Hello there", "Hello there"]
            figures = [t for t in _texts(pane, "figures") if "TTFT" in t]
            assert len(figures) == 2
            assert pane.query_one("#chat-input", Input).has_focus
            await _say(pilot, pane, "third", 3)  # continues it, with the history
            sent = [m["content"] for m in srv.bodies[-1]["messages"] if m["role"] == "user"]
            assert sent == ["first", "second", "third"]
        assert len(Store().load(conv_id).turns) == 6


async def test_ctrl_n_keeps_the_old_one_and_the_list_renames_deletes_exports(qhome):
    with FaultServer() as srv:
        app = _app(srv, qhome)
        async with app.run_test(size=(150, 45)) as pilot:
            pane = await _ready(pilot, app)
            await _say(pilot, pane, "alpha", 1)
            first = pane.conversation.id
            await pilot.press("ctrl+n")
            assert pane.conversation.turns == [] and pane.conversation.id == ""
            await _say(pilot, pane, "beta", 1)
            assert len(Store().list()) == 2
            await pilot.press("ctrl+o")  # works while typing too
            table = app.screen.query_one(DataTable)
            assert await wait_until(pilot, lambda: table.row_count == 2)
            assert table.get_row_at(0)[0].endswith("beta")  # the newest first, the open one marked
            await pilot.press("down", "r")
            box = app.screen.query_one("#rename", Input)
            assert box.has_focus and box.value == "alpha"
            box.value = ""
            await pilot.press(*"renamed one", "enter")
            assert await wait_until(pilot, lambda: Store().load(first).title == "renamed one")
            await pilot.press("x")
            md = (qhome / "data" / "exports" / f"{first}.md").read_text()
            assert md.startswith("# renamed one") and "## You\n\nalpha" in md
            await pilot.press("d")
            await pilot.press("n")  # any key but y keeps it
            assert len(Store().list()) == 2
            await pilot.press("d", "y")
            assert await wait_until(pilot, lambda: len(Store().list()) == 1 and table.row_count == 1)
            await pilot.press("escape")
            assert pane.query_one("#chat-input", Input).has_focus


async def test_per_chat_settings_are_sent_and_saved(qhome):
    with FaultServer() as srv:
        app = _app(srv, qhome, "chat.temperature=0.3")
        async with app.run_test(size=(150, 45)) as pilot:
            pane = await _ready(pilot, app)
            assert pane.conversation.params.temperature == 0.3  # the default from [chat]
            await pilot.press("ctrl+s")
            temp = app.screen.query_one("#param-temperature", Input)
            temp.value = "5"
            app.screen.query_one("#param-top_p", Input).value = "0.5"
            app.screen.query_one("#param-max_tokens", Input).value = "64"
            await pilot.press("enter")
            assert "out of range" in str(app.screen.query_one("#detail").render())  # refused, not saved
            temp.value = "1.2"
            await pilot.press("enter")
            assert await wait_until(pilot, lambda: pane.conversation.params.temperature == 1.2)
            await _say(pilot, pane, "hi", 1)
            body = srv.bodies[-1]
            assert (body["temperature"], body["top_p"], body["max_tokens"]) == (1.2, 0.5, 64)
        saved = Store().load(Store().list()[0].id)
        assert (saved.params.temperature, saved.params.top_p, saved.params.max_tokens) == (1.2, 0.5, 64)


async def test_a_message_that_would_not_fit_is_not_sent(qhome):
    with FaultServer() as srv:
        srv.httpd.max_model_len = 110
        app = _app(srv, qhome, "chat.max_tokens=60")
        async with app.run_test(size=(150, 45)) as pilot:
            pane = await _ready(pilot, app)
            for n in range(1, 4):
                await _say(pilot, pane, f"q{n}", n)
            sent = len(srv.bodies)
            # 10 (system) + 3 x (6 + 7) + the new message (5 + 3 words): 57 + 60 > 110
            await pilot.press(*"a b c", "enter")
            from tui.screens.context_fit import ContextFitScreen
            assert await wait_until(pilot, lambda: isinstance(app.screen, ContextFitScreen))
            assert len(srv.bodies) == sent  # never sent
            assert "> max_model_len 110" in str(app.screen.query_one("#question").render())
            assert pane.query_one("#chat-input", Input).value == "a b c"  # kept for editing
            await pilot.press("d")
            assert await wait_until(pilot, lambda: len(pane.conversation.replies()) == 4 and not pane.streaming)
            users = [m["content"] for m in srv.bodies[-1]["messages"] if m["role"] == "user"]
            assert users[-1] == "a b c" and "q1" not in users
            assert "left out" in str(pane.query_one("#chat-budget", Static).render())
            # lowering max_tokens is the other way out
            pane.conversation.params.max_tokens = 115
            await pilot.press(*"z", "enter")
            assert await wait_until(pilot, lambda: isinstance(app.screen, ContextFitScreen))
            await pilot.press("m")
            assert await wait_until(pilot, lambda: len(pane.conversation.replies()) == 5 and not pane.streaming)
            assert srv.bodies[-1]["max_tokens"] == pane.conversation.params.max_tokens < 115
        saved = Store().load(pane.conversation.id)
        assert saved.context_start > 0 and len(saved.turns) == 10  # all kept in the file


async def test_esc_cuts_the_reply_keeps_it_marked_and_closes_the_stream(qhome):
    async with _reply_streaming(qhome, "word5") as (srv, pilot, pane):
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not pane.streaming)
        assert await wait_until(pilot, lambda: srv.httpd.disconnects, tries=40)  # the server saw it go
        reply = pane.conversation.replies()[0]
        assert reply["cut"] is True and reply["content"].startswith("word0 word1")
        assert any("cut by esc" in t for t in _texts(pane, "figures"))
        assert pane.query_one("#chat-input", Input).has_focus
    assert Store().load(pane.conversation.id).replies()[0]["cut"] is True


async def test_copy_a_code_block_from_the_transcript_says_which_path(qhome, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("SSH_CONNECTION", "10.0.0.1 5000 10.0.0.2 22")
    with FaultServer() as srv:
        srv.httpd.reply = ["Try this:\n\n```python\nprint(1)\n", "```\n\nand then\n\n```sh\nls\n```\n"]
        app = _app(srv, qhome)
        copied, notes = [], []
        monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
        real = app.notify
        monkeypatch.setattr(app, "notify", lambda msg, **kw: (notes.append(msg), real(msg, **kw)))
        async with app.run_test(size=(150, 45)) as pilot:
            pane = await _ready(pilot, app)
            await _say(pilot, pane, "code please", 1)
            await pilot.press("up")
            assert "reply 1 of 1" in str(pane.query_one("#chat-cursor", Static).render())
            await pilot.press("down")
            assert "code block 1 (python, 1 line) in reply 1" in str(pane.query_one("#chat-cursor", Static).render())
            await pilot.press("y")
            assert await wait_until(pilot, lambda: any("copied the code block" in n for n in notes))
            assert copied == ["print(1)\n"]
            note = next(n for n in notes if "copied the code block" in n)
            assert "OSC 52 sent" in note and "SSH session" in note and "also saved as" in note
            path = note.rsplit("also saved as ", 1)[1]
            assert open(path).read() == "print(1)\n"
            await pilot.press("down", "y")
            assert await wait_until(pilot, lambda: copied[-1] == "ls\n")
            await pilot.press("q")  # not a command here: back to the input, as text
            box = pane.query_one("#chat-input", Input)
            assert box.has_focus and box.value == "q"
            await pilot.press("ctrl+y")
            assert await wait_until(pilot, lambda: copied[-1].startswith("Try this:"))
    assert json.loads(json.dumps(copied))  # plain strings


async def test_the_palette_has_the_chat_commands(qhome):
    from tui.screens.chat_settings import ChatSettingsScreen
    from tui.screens.conversations import ConversationsScreen

    with FaultServer() as srv:
        app = _app(srv, qhome)
        async with app.run_test(size=(150, 45)) as pilot:
            commands = {c.title: c.callback for c in app.get_system_commands(app.screen)}
            wanted = {"Chat: saved conversations", "Chat: this chat's settings", "Chat: new conversation"}
            assert wanted <= set(commands)
            await commands["Chat: saved conversations"]()
            assert await wait_until(pilot, lambda: isinstance(app.screen, ConversationsScreen))
            assert app.main_screen.view == "chat"
            await pilot.press("escape")
            await commands["Chat: this chat's settings"]()
            assert await wait_until(pilot, lambda: isinstance(app.screen, ChatSettingsScreen))
            assert await wait_until(pilot, lambda: app.screen.query("#param-system_prompt"))
            assert app.screen.query_one("#param-system_prompt", Input).has_focus
            await pilot.press("escape")


async def test_ctrl_s_says_where_a_new_chats_value_comes_from(qhome):
    """The demo's chats start at max_tokens 64, the schema says 512: the help names both."""
    from tui.screens.chat_settings import ChatSettingsScreen

    with FaultServer() as srv:
        app = _app(srv, qhome, "chat.max_tokens=64")
        async with app.run_test(size=(150, 45)) as pilot:
            await _ready(pilot, app)
            await pilot.press("ctrl+s")
            assert await wait_until(pilot, lambda: isinstance(app.screen, ChatSettingsScreen))
            helps = [str(w.render()) for w in app.screen.query(".help").results(Label)]
            assert any("new chats start at 64 ([chat]; built-in default 512)" in h for h in helps), helps
            assert any("new chats start at 0.7 (the built-in default)" in h for h in helps), helps
            assert app.screen.query_one("#param-max_tokens", Input).value == "64"
            await pilot.press("escape")


async def test_ctrl_n_during_a_reply_cuts_it_into_the_old_conversation(qhome):
    async with _reply_streaming(qhome, "word3") as (srv, pilot, pane):
        old = pane.conversation
        await pilot.press("ctrl+n")
        assert await wait_until(pilot, lambda: pane.conversation is not old and not pane.streaming)
        await pilot.pause(0.2)
        shown = _texts(pane, "figures")
        assert not pane.query(ReplyView) and not any("cut" in t for t in shown), shown
    assert Store().load(old.id).replies()[0]["cut"] is True
