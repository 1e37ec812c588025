"""Pilot test of the doctor screen (d): the real checks on this machine's demo settings."""

from __future__ import annotations

from textual.widgets import DataTable

from backend.server.client import Poll
from tests.helpers.console import app_with, wait_until
from tui.screens.doctor import DoctorScreen
from tui.screens.main import MainScreen


async def test_d_shows_every_check_worst_first(qhome):
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome, "planner.device=cpu")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("d")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DoctorScreen))
        table = app.screen.query_one(DataTable)
        assert await wait_until(pilot, lambda: table.row_count >= 10, tries=200)
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        names = [r[1] for r in rows]
        assert {"vllm", "shm", "port", "server"} <= set(names)
        ranks = {"FAIL": 0, "WARN": 1, "OK": 2, "SKIP": 3}
        order = [ranks[str(r[0])] for r in rows]
        assert order == sorted(order)  # worst first
        assert str(rows[names.index("cuda-libs")][0]) == "SKIP"  # planner.device = cpu
        summary = str(app.screen.query_one("#summary").render())
        assert "ok" in summary and "skipped" in summary
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))


async def test_p_runs_the_all_reduce_check_and_adds_its_rows(qhome):
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome, "planner.device=cpu")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("d")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DoctorScreen))
        table = app.screen.query_one(DataTable)
        assert await wait_until(pilot, lambda: table.row_count >= 10, tries=200)
        await pilot.press("p")
        label = app.screen.query_one("#p2p")
        assert "running" in str(label.render())
        assert await wait_until(pilot, lambda: "p2p/as-configured" in table.rows, tries=1200)
        row = table.get_row("p2p/as-configured")
        assert str(row[0]) == "HEALTHY" and "summed right" in str(row[2])
        assert str(table.get_row("p2p/custom-all-reduce")[0]) == "SKIP"
        assert "healthy" in str(label.render())
