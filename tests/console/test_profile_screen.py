"""Pilot tests of the profiles dialog (p): the ledger's verdict per profile, switching, the status bar."""

from __future__ import annotations

from textual.widgets import OptionList

from backend.server.client import Poll
from backend.settings import load
from backend.spawn import Origin
from tests.helpers.console import READY, ScriptedClient, wait_until
from tui.app import make_app


async def test_p_lists_profiles_and_a_running_server_restarts_with_one_after_yes(cfg):
    settings = load(config=str(cfg))
    client = ScriptedClient([Poll(state=READY, profile=None)])
    client.origin = Origin(config=str(cfg))
    app = make_app(settings, client)
    async with app.run_test(size=(150, 45)) as pilot:
        from tui.screens.profiles import ProfileScreen
        from tui.widgets.status_bar import StatusBar

        bar = app.screen.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "READY" in bar.last_text)
        assert "profile" not in bar.last_text
        await pilot.press("p")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ProfileScreen))
        box = app.screen.query_one(OptionList)
        assert await wait_until(pilot, lambda: box.option_count == 1 + len(settings.profiles))
        shown = " ".join(str(box.get_option_at_index(i).prompt) for i in range(box.option_count))
        assert "long" in shown and "max concurrency 2.05x at 32,768" in shown and "fits" in shown
        assert "KV " in shown and "⚠" in shown  # batch warns
        await pilot.press("down", "down", "enter")  # (none), chat, long
        assert await wait_until(pilot, lambda: "Restart the server with profile long?" in str(
            app.screen.query_one("#question").render()) if app.screen.query("#question") else False)
        await pilot.press("y")
        assert await wait_until(pilot, lambda: "stop" in client.actions and "start" in client.actions, tries=100)
        assert app.settings.profile == "long" and app.settings.server["max_model_len"] == 32768
        assert client.origin == Origin(config=str(cfg.resolve()), profile="long")
        assert client.origin.argv()[-2:] == ["--profile", "long"]


async def test_switching_while_stopped_only_selects_and_shows_it(cfg):
    settings = load(config=str(cfg))
    client = ScriptedClient([Poll(state={"state": "stopped"})])
    app = make_app(settings, client)
    async with app.run_test(size=(150, 45)) as pilot:
        from tui.screens.profiles import ProfileScreen
        from tui.widgets.status_bar import StatusBar

        await pilot.press("p")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ProfileScreen))
        box = app.screen.query_one(OptionList)
        assert await wait_until(pilot, lambda: box.option_count > 1)
        await pilot.press("down", "enter")  # chat
        assert await wait_until(pilot, lambda: app.settings.profile == "chat")
        assert client.actions == []
        bar = app.screen.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "profile chat" in bar.last_text)


