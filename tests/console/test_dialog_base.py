"""Dialog (tui/screens/dialog.py): the frame every modal dialog shares. A dialog gets its title, body
and keys line in that order inside #dialog, esc closes it, its own stylesheet wins over the frame,
and no modal screen of the console builds its own frame again."""

from __future__ import annotations

import importlib
import pkgutil

from textual.app import ComposeResult
from textual.color import Color
from textual.screen import ModalScreen
from textual.widgets import Label, Static

import tui.screens
from backend.server.client import Poll
from tests.console.test_console_layout import region_text
from tests.helpers.console import app_with, wait_until
from tui.screens.dialog import Dialog


class _Sample(Dialog[str]):
    HEADING = "A title"
    KEYS = "x: do it   esc: close (the [chat] table)"

    def compose_body(self) -> ComposeResult:
        yield Static("the body", id="body")


def _modal_screens() -> list[type[ModalScreen[object]]]:
    for mod in pkgutil.iter_modules(tui.screens.__path__):
        importlib.import_module(f"tui.screens.{mod.name}")
    found, todo = [], list(ModalScreen.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("tui.screens.") and cls.__module__ != "tui.screens.dialog":
            found.append(cls)
    return found


def test_every_modal_screen_of_the_console_is_a_dialog():
    screens = _modal_screens()
    assert len(screens) >= 17  # every one: a module that stops being found fails here, not silently
    assert [c.__name__ for c in screens if not issubclass(c, Dialog)] == []


async def test_title_body_and_keys_line_in_the_frame_and_esc_closes(qhome):
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    got: list[str | None] = []
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(_Sample(), got.append)
        assert await wait_until(pilot, lambda: isinstance(app.screen, _Sample) and app.screen.query("#keys"))
        frame = app.screen.query_one("#dialog")
        assert [w.id for w in frame.children] == ["question", "body", "keys"]
        keys = app.screen.query_one("#keys", Label)
        assert "the [chat] table" in "".join(region_text(app, keys))  # plain text, not markup
        assert keys.styles.margin.top == 1
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, _Sample))
    assert got == [None]


async def test_a_dialogs_own_stylesheet_wins_over_the_frame(qhome):
    from tui.screens.confirm import ConfirmScreen
    from tui.screens.history import HistoryScreen

    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(ConfirmScreen("Stop the server?"))
        assert await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#keys"))
        await pilot.pause()
        frame = app.screen.query_one("#dialog")
        assert frame.outer_size.width == 64  # confirm.tcss; the frame's default is as wide as it needs
        assert frame.styles.border_top[1] == Color.parse(app.get_css_variables()["warning"])  # not $primary
        app.pop_screen()
        app.push_screen(HistoryScreen())
        assert await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.query("#keys"))
        await pilot.pause()
        assert app.screen.query_one("#keys").styles.margin.top == 0  # history.tcss: no gap above its keys
