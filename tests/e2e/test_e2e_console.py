"""End to end, from the console's keys, on the real vLLM CPU demo server (a few minutes):
s → READY; x (confirmed) → STOPPED and the console is free at once (it used to stay "busy" ~50 s
while the exited supervisor sat unreaped); s → STARTING within 2 s; x while it loads shows the
countdown to SIGKILL; the phase after the stop is "stopped"."""

from __future__ import annotations

import time

import pytest

from tests.helpers.e2e import START_TIMEOUT, cli, pilot_waiter, qwen_home

pytestmark = pytest.mark.e2e


@pytest.fixture
def demo_home(tmp_path, vllm_lock):
    with qwen_home(tmp_path / "home") as home:
        yield home
        cli("stop", timeout=120)


async def test_stop_and_start_again_from_the_console(demo_home):
    from backend.server.client import ServerClient
    from backend.settings import load
    from backend.spawn import Origin
    from tui.app import make_app
    from tui.screens.confirm import ConfirmScreen
    from tui.screens.orphans import OrphanScreen
    from tui.widgets.figures_panel import rows
    from tui.widgets.status_bar import StatusBar

    app = make_app(load(demo=True, overrides=["console.on_exit=keep"]), ServerClient(Origin(demo=True)))
    async with app.run_test(size=(80, 24)) as pilot:
        until = pilot_waiter(pilot, 10)
        bar = app.screen.query_one(StatusBar)
        screen = app.screen

        async def start_pressed() -> float:
            """s; past an orphan dialog (another checkout's server) with f. The time STARTING took."""
            t0 = time.monotonic()
            await pilot.press("s")
            while time.monotonic() - t0 < 30:
                if isinstance(app.screen, OrphanScreen):
                    await pilot.press("f")
                    t0 = time.monotonic()
                if "STARTING" in bar.last_text:
                    return time.monotonic() - t0
                await pilot.pause(0.05)
            raise AssertionError(f"no STARTING after s: {bar.last_text}")

        assert await until(lambda: "STOPPED" in bar.last_text)
        assert dict(rows(screen.parsed)).get("phase") == "stopped"  # not "starting" beside STOPPED
        await start_pressed()
        assert await until(lambda: "READY" in bar.last_text, START_TIMEOUT), bar.last_text

        await pilot.press("x")
        assert await until(lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        assert await until(lambda: "STOPPED" in bar.last_text, 60), bar.last_text
        t_stopped = time.monotonic()
        assert await until(lambda: not screen.busy, 5), "still busy after the stop"
        assert time.monotonic() - t_stopped < 2.0
        assert screen.parsed.get("phase") == "stopped"

        took = await start_pressed()
        assert took < 2.0, f"STARTING {took:.1f} s after s"

        await pilot.press("x")  # a loading server: no question (console.confirm = running)
        assert await until(lambda: "SIGKILL in" in bar.last_text or "STOPPED" in bar.last_text, 10), bar.last_text
        assert await until(lambda: "STOPPED" in bar.last_text, 90), bar.last_text
        assert await until(lambda: not screen.busy, 5)
        app.exit()
