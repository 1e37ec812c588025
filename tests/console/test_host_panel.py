"""The host panel at 80×24 (under i) and wider: RAM, swap, the server's RSS, and the sleep-fit warning."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from backend.server.client import Poll
from tests.console.test_console_layout import region_text
from tests.helpers.console import PARSED, READY, app_with, wait_until
from tui.widgets.host_panel import HostPanel


@pytest.fixture
def server_proc():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield child.pid
    child.stdin.close()
    child.wait(10)


@pytest.mark.parametrize("size", [(80, 24), (150, 45)], ids=["80x24", "150x45"])
async def test_host_panel_shows_ram_and_each_rss_and_fits(qhome, server_proc, size):
    state = dict(READY, pid=server_proc, supervisor_pid=os.getpid())
    app, _ = app_with([Poll(state=state, parsed=dict(PARSED, weights_gib=1.0))], qhome, "console.host_interval_s=0.5")
    async with app.run_test(size=size) as pilot:
        panel = app.screen.query_one(HostPanel)
        assert await wait_until(pilot, lambda: len([r for r in panel.last_rows if r[0] == "RSS"]) == 2, tries=100)
        rows = panel.last_rows
        assert rows[0][0] == "CPU" and rows[1][0] == "RAM" and " used, " in rows[1][1] and "free of" in rows[1][1]
        assert rows[3][1].startswith(f"supervisor {os.getpid()}: ") and rows[4][1].startswith(f"process {server_proc}:")
        assert panel.warning is None  # 1 GiB of weights fits
        if size[0] < 100:
            await pilot.press("i")
        await pilot.pause(0.2)
        app.screen.query_one("#side").scroll_to_widget(panel, top=True, animate=False)
        await pilot.pause(0.2)
        assert panel.region.right <= size[0] and panel.region.height >= len(rows) + 2
        text = "\n".join(region_text(app, panel))
        for name, value in panel.last_rows:  # the sample shown now (a new one may have come since)
            head = value.split(":")[0] if name == "RSS" else value.split()[0]
            assert re.search(rf"{name}\s+{re.escape(head)}", text), f"{value!r} not shown at {size}:\n{text}"


async def test_a_level_1_sleep_that_does_not_fit_is_warned_and_z_asks_twice(qhome):
    state = dict(READY, state="ready", supervisor_pid=os.getpid(), sleep_enabled=True)
    app, client = app_with([Poll(state=state, parsed=dict(PARSED, weights_gib=100_000.0))], qhome)
    calls = []
    client.sleep_wake = lambda action: (calls.append(action), (True, "asleep"))[1]
    async with app.run_test(size=(80, 24)) as pilot:
        panel = app.screen.query_one(HostPanel)
        assert await wait_until(pilot, lambda: panel.warning is not None, tries=100)
        assert "level 2" in panel.warning and "host RAM" in panel.warning
        await pilot.press("z")
        await pilot.pause(0.2)
        assert calls == []  # the first z only warns
        await pilot.press("z")
        assert await wait_until(pilot, lambda: calls == ["sleep"])
