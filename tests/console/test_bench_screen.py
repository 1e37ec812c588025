"""Pilot tests of the load-test dialog (b) without a server; the real run is in test_e2e.py."""

from __future__ import annotations

from backend.server.client import Poll
from tests.helpers.console import app_with, bench_dialog_on_a_closed_port, wait_until
from tui.screens.main import MainScreen


async def test_b_needs_a_ready_server(qhome):
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(150, 45)) as pilot:
        await pilot.press("b")
        await pilot.pause(0.2)
        assert isinstance(app.screen, MainScreen)


async def test_a_server_that_does_not_answer_is_explained_and_plus_doubles(qhome):
    async with bench_dialog_on_a_closed_port(qhome) as (app, pilot):
        screen = app.screen
        results = lambda: str(screen.query_one("#results").render())  # noqa: E731
        assert await wait_until(pilot, lambda: "cannot connect" in results())
        assert "fix:" in results() and not screen.running
        assert screen.report["completed"] == 0
        await pilot.press("plus")
        assert screen.config.concurrency == 16 and screen.config.requests == 32
        assert "16 in flight" in str(screen.query_one("#config").render())
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
