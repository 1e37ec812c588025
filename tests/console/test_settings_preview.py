"""Pilot tests of the settings screen's live ledger preview: it changes as a value is typed, before
anything is saved; a value that would fail to start says so with the fix."""

from __future__ import annotations

from textual.widgets import Static

from backend.ledger.preview import preview, reads
from backend.settings import load
from tests.helpers.console import wait_until
from tests.helpers.settings_screen import make, open_at


def preview_text(app) -> str:
    return str(app.screen.query_one("#preview", Static).render())


async def test_preview_changes_as_the_value_is_typed(cfg):
    before = cfg.read_text()
    app, _ = make(cfg)
    async with app.run_test(size=(150, 45)) as pilot:
        await open_at(pilot, app, "server.max_model_len")
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: "max_model_len = 8192: fits" in preview_text(app))
        assert app.screen.query_one("#preview").display
        shown = preview_text(app)
        assert "max concurrency 8.1" in shown and "largest max_model_len 32,768 (the model's limit" in shown
        await pilot.press(*["backspace"] * 4, "1", "6")  # 16: fits, the cache holds thousands of them
        assert await wait_until(pilot, lambda: "max_model_len = 16: fits" in preview_text(app))
        await pilot.press("3", "8", "4")  # 16384
        assert await wait_until(pilot, lambda: "max_model_len = 16384: fits" in preview_text(app))
        assert "max concurrency 4.0" in preview_text(app)
        await pilot.press("0")  # 163840: beyond the model
        assert await wait_until(pilot, lambda: "163840: would FAIL to start" in preview_text(app))
        assert "fix: server.max_model_len = 32768" in preview_text(app)
        assert app.screen.query_one("#preview").has_class("-fail")
        await pilot.press("x")
        assert await wait_until(pilot, lambda: "not a value for server.max_model_len" in preview_text(app))
        assert cfg.read_text() == before, "a preview writes nothing"
        await pilot.press("backspace", "enter")  # saved anyway: the failure is said at once
        assert await wait_until(pilot, lambda: "would fail" in str(app.screen.query_one("#message", Static).render()))
        assert "max_model_len = 163840" in cfg.read_text()


async def test_no_preview_for_keys_the_ledger_does_not_read(cfg):
    app, _ = make(cfg)
    async with app.run_test(size=(150, 45)) as pilot:
        await open_at(pilot, app, "server.port")
        await pilot.press("enter")
        await pilot.press("1")
        await pilot.pause(0.2)
        assert not app.screen.query_one("#preview").display


def test_preview_keys_and_forced_values(cfg):
    assert reads("server", "gpu_memory_utilization") and reads("planner", "gpu_memory_gib")
    assert not reads("server", "port") and not reads("chat", "max_tokens")
    s = load(config=str(cfg), overrides=["server.max_model_len=4096"])
    p = preview(s, "server", "max_model_len", "8192")
    assert p.fits and p.max_model_len == 8192 and "--set" in p.note
    s = load(config=str(cfg), profile="long")
    p = preview(s, "server", "gpu_memory_utilization", "0.5")
    assert p.max_model_len == 32768 and not p.fits and p.errors and p.errors[0]["fix"]
