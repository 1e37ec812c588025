"""Every dialog at 80×24 (and 120×40, 200×60): each line of its text readable whole, its keys line
on screen as it opens; `?`'s keys panel closed by esc or `?` without side effects."""

from __future__ import annotations

import pytest
from textual.widgets import Label

from backend.server.client import Poll
from tests.console.test_console_layout import region_text
from tests.helpers.console import PARSED, READY, app_with, bench_dialog_on_a_closed_port, wait_until

SIZES = [(80, 24), (120, 40), (200, 60)]


def _squash(text: str) -> str:
    return "".join(text.split())


def cut_labels(app, labels) -> list[str]:
    """Those of the labels the screen does not show whole where they are."""
    cut = []
    for label in labels:
        text = _squash(str(label.render()))
        if not text or not label.display or not label.region.area:
            continue
        shown = _squash("".join(region_text(app, label)))
        if shown != text:
            cut.append(f"{label.id or label.classes}: {str(label.render())!r} shows {shown!r}")
    return cut


async def _scroll_each_into_view(app, pilot) -> list[str]:
    cut = []
    for label in list(app.screen.query(Label)):
        if not label.display:
            continue
        label.scroll_visible(animate=False, immediate=True)
        await pilot.pause(0.05)
        cut += cut_labels(app, [label])
    return cut


async def _open_chat_dialog(pilot, app, key):
    from tui.widgets.chat_pane import ChatPane

    await pilot.press("c")
    pane = app.screen.query_one(ChatPane)
    assert await wait_until(pilot, lambda: pane.built and app.screen.query("#chat-input"), tries=100)
    await pilot.press(key)


async def _open(pilot, app, how):
    if how.startswith("ctrl+"):
        await _open_chat_dialog(pilot, app, how)
    else:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press(how)


DIALOGS = [  # (key, screen module.class)
    ("ctrl+s", "chat_settings.ChatSettingsScreen"),
    ("ctrl+o", "conversations.ConversationsScreen"),
    ("e", "settings.SettingsScreen"),
    ("p", "profiles.ProfileScreen"),
    ("d", "doctor.DoctorScreen"),
    ("t", "report.ReportScreen"),
    ("g", "pull.PullScreen"),
    ("q", "quit.QuitScreen"),
    ("x", "confirm.ConfirmScreen"),
]


def _screen_type(name):
    import importlib

    module, cls = name.split(".")
    return getattr(importlib.import_module(f"tui.screens.{module}"), cls)


async def _assert_fits(app, pilot, size):
    await pilot.pause(0.5)
    keys = app.screen.query("#keys")
    if keys:  # the keys line is on screen as the dialog opens, not below its fold
        shown = _squash("".join(region_text(app, keys.first())))
        assert shown == _squash(str(keys.first().render())), f"keys line cut at {size}: {shown!r}"
    cut = await _scroll_each_into_view(app, pilot)
    assert not cut, f"cut at {size}:\n" + "\n".join(cut)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
@pytest.mark.parametrize("key, screen", DIALOGS, ids=[s.split(".")[1] for _, s in DIALOGS])
async def test_every_dialog_shows_its_text_whole(qhome, size, key, screen):
    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome, "planner.device=cpu")
    async with app.run_test(size=size) as pilot:
        await _open(pilot, app, key)
        assert await wait_until(pilot, lambda: isinstance(app.screen, _screen_type(screen)), tries=100)
        await _assert_fits(app, pilot, size)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_the_load_test_dialog_shows_its_text_whole(qhome, size):
    async with bench_dialog_on_a_closed_port(qhome, size) as (app, pilot):
        await _assert_fits(app, pilot, size)


async def test_at_80x24_the_chat_settings_scroll_to_the_field_tab_reaches(qhome):
    from textual.widgets import Input

    from tui.screens.chat_settings import ChatSettingsScreen

    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome, "chat.max_tokens=321")
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_chat_dialog(pilot, app, "ctrl+s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ChatSettingsScreen))
        keys = app.screen.query_one("#keys", Label)
        assert "[chat])" in _squash("".join(region_text(app, keys)))  # text, not markup
        await pilot.press("tab", "tab", "tab")
        box = app.screen.query_one("#param-max_tokens", Input)
        assert await wait_until(pilot, lambda: box.has_focus)
        await pilot.pause(0.3)
        assert "321" in "".join(region_text(app, box))
        help_line = app.screen.query(".help").last()
        assert cut_labels(app, [help_line, keys]) == []
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, ChatSettingsScreen))


async def test_esc_or_question_mark_closes_the_keys_panel_and_nothing_else(qhome):
    from textual.widgets import HelpPanel

    from tui.widgets.log_pane import LogPane

    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.screen.query_one(LogPane)
        await pilot.press("l")  # a level filter esc would clear
        assert log.level != "all"
        level = log.level
        for close in ("escape", "question_mark"):
            await pilot.press("question_mark")
            assert await wait_until(pilot, lambda: len(app.screen.query(HelpPanel)) == 1)
            await pilot.press(close)
            assert await wait_until(pilot, lambda: not app.screen.query(HelpPanel)), close
            assert log.level == level, close  # the filter stays: that esc only closed the panel
        await pilot.press("escape")  # with no panel open, esc is the log's again
        assert log.level == "all"


async def test_in_the_chat_esc_closes_the_keys_panel_not_the_reply_nor_the_chat(qhome):
    from textual.widgets import HelpPanel

    from tests.console.test_conversations_console import _reply_streaming

    async with _reply_streaming(qhome, "word2") as (srv, pilot, pane):
        app = pane.app
        await pilot.press("f1")
        assert await wait_until(pilot, lambda: len(app.screen.query(HelpPanel)) == 1)
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not app.screen.query(HelpPanel))
        await pilot.pause(0.2)
        assert pane.streaming  # the reply goes on
        await pilot.press("f1", "escape")  # once more: still the chat, still streaming
        assert await wait_until(pilot, lambda: not app.screen.query(HelpPanel))
        assert pane.streaming and app.screen.view == "chat"
        await pilot.press("escape")  # with no panel open, esc is the chat's again: it stops the reply
        assert await wait_until(pilot, lambda: not pane.streaming)


def _pushed():
    from backend.server import orphans
    from tests.helpers.console import ScriptedClient
    from tui.screens.context_fit import ContextFitScreen
    from tui.screens.exposure import ExposureScreen
    from tui.screens.orphans import OrphanScreen
    from tui.screens.preflight import PreflightScreen

    long = "the longest line this dialog says, in words a user reads at 80 columns without losing its end"
    return {
        "preflight": lambda: PreflightScreen([{"kind": "memory", "message": long, "fix": "server.max_model_len = 4096",
                                               "severity": "error"}]),
        "context_fit": lambda: ContextFitScreen(long, 2, 4096),
        "exposure": lambda: ExposureScreen(long),
        "orphans": lambda: OrphanScreen(orphans.OrphanScan([], None, "test"), ScriptedClient([Poll(state={})])),
    }


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
@pytest.mark.parametrize("name", ["preflight", "context_fit", "exposure", "orphans"])
async def test_the_start_and_send_dialogs_show_their_text_whole(qhome, size, name):
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=size) as pilot:
        screen = _pushed()[name]()
        app.push_screen(screen)
        assert await wait_until(pilot, lambda: app.screen is screen)
        await _assert_fits(app, pilot, size)
