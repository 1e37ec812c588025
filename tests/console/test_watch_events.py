"""Issue 26: --watch (every panel, no key that starts, stops, restarts, sleeps, kills or saves
settings; the footer says watch mode), the events view (j) and the status bar's last event."""

from __future__ import annotations

from backend import events
from backend.server.client import Poll
from tests.helpers.console import app_with, wait_until
from tui.console_app import WATCH_BLOCKED
from tui.screens.events import EventsScreen
from tui.screens.main import MainScreen
from tui.widgets.keys_footer import KeysFooter
from tui.widgets.status_bar import StatusBar

READY = Poll(state={"state": "ready", "supervisor_pid": 4000, "pid": 4001, "port": 8011})


async def test_watch_mode_has_no_control_key_and_says_so(qhome):
    app, client = app_with([READY], qhome, "console.confirm=never")
    app.watching = True
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        assert isinstance(screen, MainScreen)
        for key in ("s", "x", "r", "e", "z", "p", "n", "g"):
            await pilot.press(key)
            await pilot.pause(0.1)
            assert app.screen is screen, key  # no dialog, no settings, no profile switch
        assert client.actions == []
        footer = screen.query_one(KeysFooter)
        assert await wait_until(pilot, lambda: footer.shown and footer.shown[0][0] == "watch mode")
        keys = {what for _, what in footer.shown}
        assert not keys & {"start", "stop", "restart", "settings", "sleep/wake", "profiles"}, keys
        for action in WATCH_BLOCKED:
            assert screen.check_action(action, ()) is False
        await pilot.press("j")  # looking is allowed
        assert await wait_until(pilot, lambda: isinstance(app.screen, EventsScreen))


async def test_without_watch_the_same_keys_reach_the_client(qhome):
    app, client = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("s")
        assert await wait_until(pilot, lambda: client.actions == ["start"])


async def test_the_events_view_and_the_status_bars_last_event(qhome):
    events.record_event("start", "launched pid 4001", server_pid=4001)
    events.record_event("restart", "restarted: ready", diff={"server.max_model_len": [8192, 16384]})
    app, client = app_with([READY], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        bar = app.screen.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "restarted by" in bar.last_text), bar.last_text
        assert "max_model_len 8192 → 16384" in bar.last_text
        await pilot.press("j")
        assert await wait_until(pilot, lambda: isinstance(app.screen, EventsScreen))
        await pilot.pause()
        shown = [s.text for s in app.screen._compositor.render_strips()]
        user = events.read_events()[0]["user"]
        # at 80 columns each event is one row: its outcome is not wrapped under the date column
        start = next(line for line in shown if " start " in line)
        assert user in start and "launched pid 4001" in start, shown
        assert any(" restart " in line and "max_model_len 8192 → 16384" in line for line in shown), shown
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))


async def test_the_status_bar_says_a_stops_outcome_once(qhome):
    # "— stopped in 0.6 s  · stopped by root 1 min ago: stopped in 0.6 s" at 80 columns
    from tui.widgets.status_bar import event_text

    events.record_event("stop", "stopped in 0.6 s")
    app, _ = app_with([Poll(state={"state": "stopped", "detail": "stopped in 0.6 s"})], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        bar = app.screen.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "stopped by" in bar.last_text), bar.last_text
        assert bar.last_text.count("stopped in 0.6 s") == 1, bar.last_text
    assert event_text("restarted by bo 2 min ago: ready", "stopped in 0.6 s") == "restarted by bo 2 min ago: ready"
