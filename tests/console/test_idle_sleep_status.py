"""The status bar says when the idle timer put the server to sleep (the supervisor's detail, server/idle_sleep.py)."""

from __future__ import annotations

from backend.server.client import Poll
from tests.helpers.console import READY, app_with, wait_until
from tui.widgets.status_bar import StatusBar


async def test_an_idle_sleep_is_said_in_the_status_bar_at_80_columns(qhome):
    asleep = dict(READY, state="sleeping", sleep_enabled=True, sleep_level=1,
                  detail="asleep after 600 s idle; level 1: 40.1 GiB of GPU memory freed")
    app, _ = app_with([Poll(state=asleep)], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        bar = app.screen.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "SLEEPING" in bar.last_text)
        assert "asleep after 600 s idle" in bar.last_text
