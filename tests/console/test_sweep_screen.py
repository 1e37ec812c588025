"""Pilot tests of the sweep dialog (b, then w) against a FAKE server (tests/helpers/sweep.FakeScheduler,
httpx.MockTransport: NOT vLLM); the real demo server is swept in test_e2e_sweep.py."""

from __future__ import annotations

import json

import httpx
from textual.widgets import DataTable

from backend.bench import sweep
from backend.server.client import Poll
from tests.helpers.console import app_with, bench_dialog_on_a_closed_port, wait_until
from tests.helpers.sweep import FakeScheduler
from tui.screens.sweep import SweepScreen


async def test_sweep_shows_levels_table_plots_and_the_previous_sweep(qhome):
    state = {"state": "ready", "base_url": "http://127.0.0.1:8000", "served_model_name": "qwen2.5-14b"}
    app, _ = app_with([Poll(state=state)], qhome)
    fake = FakeScheduler(seqs=2, delay=0.001)
    folder = qhome / "sweeps"
    older = {"levels": [{"concurrency": 1, "output_tokens_per_s": 11.0, "ttft_ms": {"mean": 99.0}}],
             "started_at": 1}
    folder.mkdir(parents=True)
    (folder / "sweep-20260101-000000.json").write_text(json.dumps(older))
    cfg = sweep.SweepConfig([1, 4], input_tokens=20, output_tokens=6, requests_per_level=4)
    plan = {"max_concurrency": 2.0, "decode_tokens_per_s_ceiling": 50.0, "kv_cache_tokens": 1000}
    async with app.run_test(size=(160, 50)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        screen = SweepScreen(state, plan, cfg, transport=httpx.MockTransport(fake), save_dir=folder)
        app.push_screen(screen)
        assert await wait_until(pilot, lambda: screen.result is not None, tries=200)
        table = screen.query_one(DataTable)
        assert table.row_count == 2
        first, second = (table.get_row_at(i) for i in range(2))
        assert first[0] == "1" and second[0] == "4 *", "4 is above the ledger's max concurrency of 2"
        assert first[9] == "no" and second[9] == "yes", "the fake queues beyond 2 running"
        assert first[10] == "11.0" and first[11] == "99", "the previous sweep beside"
        levels = str(screen.query_one("#levels").render())
        assert "✓ concurrency    1: done: 4/4" in levels and "saved:" in levels and "previous sweep" in levels
        legend = str(screen.query_one("#legend").render())
        assert "max concurrency 2x" in legend and "ceiling 50 tok/s" in legend
        # no GPUs here: no energy columns that would say "unknown" in every row; the legend says it once
        headers = [str(c.label) for c in table.columns.values()]
        assert "J/token" not in headers and "tok/s/W" not in headers and headers[-1] == "prev TTFT", headers
        assert "energy unknown" in legend
        assert len(list(folder.glob("sweep-*.json"))) == 2 and len(list(folder.glob("sweep-*.csv"))) == 1
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, SweepScreen))


async def test_w_in_the_bench_dialog_opens_the_sweep(qhome):
    async with bench_dialog_on_a_closed_port(qhome) as (app, pilot):
        await pilot.press("w")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SweepScreen))
        screen = app.screen
        assert await wait_until(pilot, lambda: "cannot connect" in str(screen.query_one("#levels").render()),
                                tries=100)
        assert "fix:" in str(screen.query_one("#levels").render())
        await pilot.press("escape")


def test_the_energy_columns_come_only_where_gpu_power_is_read():
    from tui.screens.sweep import COLUMNS, shown

    assert shown(COLUMNS, True, True) == COLUMNS
    no_prev = shown(COLUMNS, False, True)
    assert no_prev[-2:] == ("J/token", "tok/s/W") and "prev tok/s" not in no_prev
    assert shown(COLUMNS, False, False)[-2:] == ("KV peak", "queued")
    assert shown(COLUMNS, True, False)[-2:] == ("prev tok/s", "prev TTFT")
