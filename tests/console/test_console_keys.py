"""Keys that cannot fire by accident, and every way out through one on_exit policy (Pilot)."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from backend.server.client import Poll
from tests.helpers.console import PARSED, READY, app_with, wait_until
from tui.screens.confirm import ConfirmScreen
from tui.screens.main import MainScreen
from tui.screens.quit import QuitScreen
from tui.screens.server_actions import needs_confirm

SENTENCE = "sure, restart it: x marks the spot; queue the bench, edit docs"  # s x r q e d b c l p i


async def test_a_sentence_in_the_chat_after_esc_is_text_and_fires_nothing(qhome):
    app, client = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(120, 36)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press("c")
        box = app.screen.query_one("#chat-input", Input)
        assert box.has_focus
        await pilot.press("escape")  # the first esc keeps the user in the chat
        assert box.has_focus and app.screen.view == "chat"
        await pilot.press(*SENTENCE)
        assert box.value == SENTENCE
        assert isinstance(app.screen, MainScreen) and client.actions == []
        # focus moved off the input (a click, tab): letters still go to it, never to the commands
        app.screen.set_focus(None)
        await pilot.press(*"sxrqedb")
        assert box.value == SENTENCE + "sxrqedb" and box.has_focus
        assert isinstance(app.screen, MainScreen) and client.actions == []
        await pilot.press("escape", "escape")  # esc esc: back to the log, where keys are commands
        assert app.screen.view == "log"


@pytest.mark.parametrize("key, action", [("x", "stop"), ("r", "restart")])
async def test_stop_and_restart_of_a_ready_server_ask_first(qhome, key, action):
    app, client = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(120, 36)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press(key)
        assert await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")  # anything but y: no
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.pause(0.2)
        assert client.actions == []
        await pilot.press(key)
        assert await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        assert await wait_until(pilot, lambda: "stop" in client.actions)


async def test_confirm_never_does_not_ask(qhome):
    app, client = app_with([Poll(state=READY, parsed=PARSED)], qhome, "console.confirm=never")
    async with app.run_test(size=(120, 36)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press("x")
        assert await wait_until(pilot, lambda: client.actions == ["stop"])


def test_confirm_policy():
    assert needs_confirm("running", "ready") and not needs_confirm("running", "starting")
    assert needs_confirm("always", "starting") and not needs_confirm("always", "stopped")
    assert not needs_confirm("never", "ready")


async def test_bad_confirm_value_is_refused_by_the_schema(qhome):
    from backend.settings import ConfigError, load

    with pytest.raises(ConfigError):
        load(overrides=["console.confirm=sometimes"])


async def _quit_by(pilot, app, way):
    """Once the server is READY: quit by a key, or by the palette's Quit."""
    assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
    if way == "palette":
        await next(c for c in app.get_system_commands(app.screen) if c.title == "Quit").callback()
    else:
        await pilot.press(way)


@pytest.mark.parametrize("way", ["q", "ctrl+q", "ctrl+c", "palette"])
async def test_every_way_out_asks_when_the_server_runs(qhome, way):
    app, client = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(120, 36)) as pilot:
        await _quit_by(pilot, app, way)
        assert await wait_until(pilot, lambda: isinstance(app.screen, QuitScreen)), way
        await pilot.press("k")
        assert await wait_until(pilot, lambda: app.quit_choice == "keep")
    assert client.actions == []


@pytest.mark.parametrize("way", ["q", "ctrl+q", "palette"])
async def test_every_way_out_follows_on_exit_stop(qhome, way):
    app, client = app_with([Poll(state=READY, parsed=PARSED)], qhome, "console.on_exit=stop")
    async with app.run_test(size=(120, 36)) as pilot:
        await _quit_by(pilot, app, way)
        assert await wait_until(pilot, lambda: "stop" in client.actions), way
    assert app.quit_choice == "stop"


async def test_ctrl_c_in_a_text_field_copies_a_selection_else_asks(qhome):
    app, client = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(120, 36)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press("c", *"hello")
        app.screen.query_one("#chat-input", Input).select_all()
        await pilot.press("ctrl+c")
        await pilot.pause(0.2)
        assert isinstance(app.screen, MainScreen) and app.clipboard == "hello"
        app.screen.query_one("#chat-input", Input).action_end()
        await pilot.press("ctrl+c")  # nothing selected: the quit path, which asks
        assert await wait_until(pilot, lambda: isinstance(app.screen, QuitScreen))
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        assert app.quit_choice is None


async def test_start_pressed_during_a_stop_follows_it(qhome):
    """x then s: the start is queued behind the stop (and the status line says so), not refused."""
    import threading

    app, client = app_with([Poll(state={"state": "starting"})], qhome, "console.confirm=never")
    gate = threading.Event()
    plain_stop = client.stop

    def slow_stop():
        gate.wait(10)
        return plain_stop()

    client.stop = slow_stop
    async with app.run_test(size=(120, 36)) as pilot:
        from tui.widgets.status_bar import StatusBar

        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "starting")
        await pilot.press("x")
        await pilot.pause(0.3)
        await pilot.press("s")
        bar = app.screen.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "stopping: waiting for the server to exit" in bar.last_text
                                and "then start" in bar.last_text), bar.last_text
        gate.set()
        assert await wait_until(pilot, lambda: client.actions == ["stop", "start"]), client.actions


async def test_stop_pressed_while_the_start_call_runs_follows_it(qhome):
    """s then x before the start call has returned (the status line may say STARTING already): the stop is
    queued behind the start, not refused as busy (the e2e console test lost its x to this)."""
    import threading

    app, client = app_with([Poll(state={"state": "stopped"})], qhome, "console.confirm=never")
    gate = threading.Event()
    plain_start = client.start
    client.start = lambda allow_orphans=False: (gate.wait(10), plain_start(allow_orphans))[1]
    async with app.run_test(size=(120, 36)) as pilot:
        from tui.widgets.status_bar import StatusBar

        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "stopped")
        await pilot.press("s")
        assert await wait_until(pilot, lambda: app.screen.busy_action == "start")
        await pilot.press("x")
        bar = app.screen.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "then stop" in bar.last_text), bar.last_text
        gate.set()
        assert await wait_until(pilot, lambda: client.actions == ["start", "stop"]), client.actions


async def test_a_restart_says_it_waits_for_the_old_server(qhome):
    import threading

    app, client = app_with([Poll(state={"state": "starting"})], qhome, "console.confirm=never")
    gate = threading.Event()
    plain_stop = client.stop
    client.stop = lambda: (gate.wait(10), plain_stop())[1]
    async with app.run_test(size=(120, 36)) as pilot:
        from tui.widgets.status_bar import StatusBar

        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "starting")
        await pilot.press("r")
        bar = app.screen.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "restarting: waiting for the old server to exit" in bar.last_text,
                                tries=10), bar.last_text  # within 0.5 s
        gate.set()
        assert await wait_until(pilot, lambda: client.actions == ["stop", "start"])


async def test_the_quit_dialog_shows_its_keys(qhome):
    """Its labels were "Keep running [k]": markup, where [k] is a tag, so the keys never showed."""
    from textual.widgets import Button

    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press("q")
        assert await wait_until(pilot, lambda: isinstance(app.screen, QuitScreen))
        labels = [str(b.label) for b in app.screen.query(Button)]
        assert labels == ["k: keep running", "s: stop server", "esc: cancel"]


async def test_notifications_show_brackets_as_text(qhome):
    """n with no [cluster] table: the notice names "[cluster]" (Rich markup used to eat it)."""
    from rich.text import Text

    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(120, 36)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press("n")
        assert await wait_until(pilot, lambda: bool(list(app._notifications)))
        app.screen.notify("a path [/tmp/x] and [b]not bold[/b]")
        await pilot.pause(0.1)
        shown = [n for n in app._notifications]
        assert all(n.markup is False for n in shown)
        # what a toast draws for each: the message as plain text, brackets and all
        drawn = [Text(n.message).plain if not n.markup else Text.from_markup(n.message).plain for n in shown]
        assert any("no [cluster] in the config file" in d for d in drawn), drawn
        assert any("[b]not bold[/b]" in d for d in drawn), drawn


async def test_the_chats_first_open_has_no_toast_over_its_help(qhome):
    # at 80x24 the "every key is text now" toast sat over the chat's help, which says the same
    from textual.widgets import Static

    from tui.widgets.chat_pane import ChatPane

    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press("c")
        pane = app.screen.query_one(ChatPane)
        assert await wait_until(pilot, lambda: pane.query_one("#chat-input", Input).has_focus)
        await pilot.pause(0.1)
        assert pane.help_in_view()
        assert not [n for n in app._notifications if "every key is text" in n.message]
        log = pane.query_one("#chat-log")
        await log.mount(*[Static(f"reply {i}") for i in range(60)])
        await pilot.pause()
        log.scroll_end(animate=False)
        assert await wait_until(pilot, lambda: not pane.help_in_view())
        await pilot.press("escape", "escape")
        await pilot.press("c")  # the help scrolled away: the toast says it
        assert await wait_until(pilot, lambda: any("every key is text" in n.message for n in app._notifications))
