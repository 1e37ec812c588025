"""The history view (h) at 80×24 and wider: every figure's sparkline on screen, the events marked on the
time axis, HTTP errors counted; read from a flight-recorder store written the recorder's way."""

from __future__ import annotations

import json
import time

import pytest

from backend import recorder
from backend.server import statefile
from backend.server.client import Poll
from tests.console.test_console_layout import region_text
from tests.helpers.console import READY, app_with, wait_until
from tui.screens.history import SERIES, HistoryScreen, spark


def _store(now: float) -> None:
    store = recorder.Store(recorder.db_path(statefile.state_path().parent), 86400, 10**5)
    for i in range(600):  # the last 50 minutes at 5 s
        t = now - 3000 + i * 5
        busy = 200 <= i < 260
        store.add_sample({"t": t, "state": "ready", "running": 4.0 if busy else 0.0, "waiting": 1.0 if busy else 0.0,
                          "kv": 0.3 if busy else 0.0, "gen_tps": 55.0 if busy else 0.0, "prompt_tps": 0.0,
                          "preempt": 0.0, "finished": 2.0 if busy else 0.0,
                          "http": json.dumps({"2xx": 2, **({"4xx": 1} if i == 230 else {})}) if busy else None,
                          "ttft": json.dumps({"0.25": 2}) if busy else None,
                          "queue": json.dumps({"0.3": 2}) if busy else None, "gpu_mem": None, "gpu_power": None})
    store.add_events([(now - 3000, "starting", "pid 1"), (now - 2990, "ready", "10 s"),
                      (now - 1200, "failed", "exit code -9"), (now - 1190, "restart", "pid 2"),
                      (now - 1180, "ready", "10 s")])
    store.close()


@pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])
async def test_history_view_shows_every_figure_and_the_events(qhome, size):
    _store(time.time())
    app, _ = app_with([Poll(state=READY)], qhome)
    async with app.run_test(size=size) as pilot:
        await pilot.press("h")
        assert await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.lines, tries=100)
        screen = app.screen
        lines = screen.lines
        assert lines[0].startswith("last hour: 600 samples, 5 events")
        events = next(x for x in lines if x.startswith("events"))
        assert "F" in events and "↻" in events and "S" in events and events.index("S") < events.index("F")
        http = next(x for x in lines if x.startswith("HTTP errors"))
        assert http.endswith("max 1") and "4xx:1" in lines[-2] and "2xx:120" in lines[-2]
        assert next(x for x in lines if x.startswith("gen tok/s")).endswith("max 55")
        await pilot.pause(0.2)
        shown = "\n".join(region_text(app, screen.query_one("#dialog")))
        for label, *_ in SERIES:  # nothing cut at the bottom, no line wrapped
            assert label in shown, f"{label} not on screen at {size}:\n{shown}"
        assert "esc: close" in shown
        assert all(len(x) <= size[0] - 4 for x in lines), lines
        await pilot.press("2")
        assert await wait_until(pilot, lambda: screen.lines and screen.lines[0].startswith("last day"))
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, HistoryScreen))


async def test_no_store_yet_is_an_empty_chart_not_an_error(qhome):
    app, _ = app_with([Poll(state=READY)], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("h")
        assert await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.lines, tries=100)
        assert app.screen.lines[0] == "last hour: 0 samples, 0 events"


def test_spark_scales_to_the_largest_and_marks_gaps():
    assert spark([0.0, 5.0, 10.0, None, float("nan")]) == " ▅█· "
    assert spark([None, None]) == "··"
    assert spark([50.0], top=100.0) == "▅"


def test_a_wide_maximum_keeps_its_unit_at_80_columns(qhome):
    # "max 4,870 ms" was cut to "max 4,870 " by a fixed 11-cell value column
    from backend import history
    from tui.screens.history import chart_lines

    now = time.time()
    store = recorder.Store(recorder.db_path(statefile.state_path().parent), 86400, 10**5)
    for i in range(60):
        store.add_sample({"t": now - 600 + i * 5, "state": "ready", "running": 8.0, "waiting": 24.0, "kv": 0.0004,
                          "gen_tps": 834.0, "prompt_tps": 0.0, "preempt": 0.0, "finished": 2.0,
                          "http": json.dumps({"2xx": 2}), "ttft": json.dumps({"5.0": 2}),
                          "queue": json.dumps({"5.0": 2}), "gpu_mem": None, "gpu_power": None})
    store.close()
    win = history.load(recorder.db_path(statefile.state_path().parent), 3600.0, now=now)
    lines = [str(x) for x in chart_lines(win, 76, "last hour")]
    p99 = next(x for x in lines if x.startswith("TTFT p99"))
    assert p99.endswith(" ms") and "max " in p99, p99
    assert next(x for x in lines if x.startswith("KV cache")).endswith("max <1 %"), "a sliver is not 0 %"
    assert all(len(x) <= 76 for x in lines), lines
    assert len({len(x) for x in lines if x.startswith(tuple(label for label, *_ in SERIES))}) == 1, "columns align"
