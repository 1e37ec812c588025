"""The console's keys for issue 19: t shows the triage report (save with w, copy with y), z puts a READY
server to sleep and wakes a sleeping one, through the client (a scripted one here)."""

from __future__ import annotations

from backend.server.client import Poll
from backend.settings import load
from tests.helpers.console import PARSED, READY, ScriptedClient, wait_until
from tui.app import make_app
from tui.screens.report import ReportScreen
from tui.widgets.status_bar import StatusBar


class SleepyClient(ScriptedClient):
    def sleep_wake(self, action: str, level: int = 1) -> tuple[bool, str]:
        self.actions.append(action)
        return True, f"{action} done"


def _app(state):
    client = SleepyClient([Poll(state=state, parsed=PARSED)])
    return make_app(load(overrides=["console.on_exit=keep"]), client), client


async def test_t_shows_the_report_and_w_saves_it_and_y_copies_it(qhome, monkeypatch):
    import backend.report

    calls = []
    monkeypatch.setattr(backend.report, "build", lambda settings, redact=True, monitor=None, status=None:
                        calls.append(redact) or ("# qwen-tui triage report\n\nState: **failed**", {}, None))
    app, _ = _app({"state": "failed"})
    copied = []
    monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("t")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ReportScreen) and app.screen.text)
        assert calls == [True]  # redacted
        assert "State: **failed**" in app.screen.query_one("#report").text
        await pilot.press("y")
        assert copied == ["# qwen-tui triage report\n\nState: **failed**"]
        await pilot.press("w")
        saved = list((qhome / "state").glob("report-*.md"))
        assert len(saved) == 1 and "State: **failed**" in saved[0].read_text()
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, ReportScreen))


async def test_z_sleeps_a_ready_server_and_wakes_a_sleeping_one(qhome):
    app, client = _app(READY)
    async with app.run_test() as pilot:
        assert await wait_until(pilot, lambda: "READY" in app.screen.query_one(StatusBar).last_text)
        await pilot.press("z")
        assert await wait_until(pilot, lambda: client.actions == ["sleep"])
        assert await wait_until(pilot, lambda: not app.screen.busy)
    app, client = _app({"state": "sleeping", "detail": "level 1: 120.0 GiB of GPU memory freed"})
    async with app.run_test() as pilot:
        assert await wait_until(pilot, lambda: "SLEEPING" in app.screen.query_one(StatusBar).last_text)
        await pilot.press("z")
        assert await wait_until(pilot, lambda: client.actions == ["wake"])
    app, client = _app({"state": "starting"})
    async with app.run_test() as pilot:
        await pilot.pause(0.2)
        await pilot.press("z")
        await pilot.pause(0.2)
        assert client.actions == []  # nothing to sleep yet
