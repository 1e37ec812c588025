"""Pilot tests of the settings screen (e): a scripted client, the repo's config.toml in tmp_path."""

from __future__ import annotations

from textual.color import Color
from textual.widgets import OptionList, Static

from tests.helpers.console import READY, wait_until
from tests.helpers.settings_screen import edit, editor, make, message, open_at
from tui.screens.main import MainScreen
from tui.screens.settings import SettingsScreen


async def test_edit_max_model_len_saves_into_the_file_with_comments(cfg):
    before = cfg.read_text()
    app, client = make(cfg)
    async with app.run_test(size=(150, 45)) as pilot:
        await open_at(pilot, app, "server.max_model_len")
        assert "saves to" in str(app.screen.query_one("#target", Static).render())
        await pilot.press("enter")
        assert editor(app).value == "8192", "the editor starts with the value as TOML"
        await pilot.press("escape")
        await edit(pilot, app, "4096")
        assert await wait_until(pilot, lambda: "saved to" in message(app))
        assert cfg.read_text() == before.replace("max_model_len = 8192", "max_model_len = 4096", 1)
        assert app.settings.server["max_model_len"] == 4096, "the app reloads its settings"
        assert not editor(app).display and "Press r" not in message(app)  # server stopped: no offer
        row = app.screen.rows["server.max_model_len"]
        assert row.value_text == "4096" and row.modified
        await pilot.press("r")  # no restart binding unless one is offered
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.pause(0.1)
    assert client.actions == []


async def test_invalid_value_shows_the_error_and_leaves_the_file_alone(cfg):
    before = cfg.read_bytes()
    app, client = make(cfg)
    async with app.run_test(size=(150, 45)) as pilot:
        await open_at(pilot, app, "server.max_model_len")
        await edit(pilot, app, "abc")
        assert await wait_until(pilot, lambda: "must be an integer" in message(app))
        assert app.screen.query_one("#message").has_class("-error")
        assert editor(app).display and editor(app).value == "abc", "the edit stays open to fix"
        await pilot.press("escape")
        assert not editor(app).display and "nothing saved" in message(app)
        assert isinstance(app.screen, SettingsScreen), "esc cancels the edit, not the screen"
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
    assert cfg.read_bytes() == before
    assert app.settings.server["max_model_len"] == 8192 and client.actions == []


async def test_esc_cancels_an_edit_without_saving(cfg):
    before = cfg.read_bytes()
    app, _ = make(cfg)
    async with app.run_test(size=(150, 45)) as pilot:
        await open_at(pilot, app, "console.on_exit")
        await pilot.press("enter")
        assert editor(app).value == '"ask"'
        await pilot.press(*["backspace"] * 5, *'"stop"', "escape")
        await pilot.pause(0.1)
        assert not editor(app).display
        rows = app.screen.query_one(OptionList)
        await pilot.press("right")
        assert rows.highlighted_option.id == "planner.gpu_memory_gib"
        await pilot.press("left", "left", "left")
        assert rows.highlighted_option.id == "chat.max_tokens", "← wraps around"
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        assert app.screen.active_bindings["e"].binding.description == "Settings"
    assert cfg.read_bytes() == before


async def save_max_model_len_while_ready(pilot, app) -> None:
    assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
    await open_at(pilot, app, "server.max_model_len")
    await edit(pilot, app, "4096")
    assert await wait_until(pilot, lambda: "Press r to restart" in message(app))


async def test_saving_a_server_key_while_ready_offers_r_and_r_restarts(cfg):
    app, client = make(cfg, state=READY)
    async with app.run_test(size=(150, 45)) as pilot:
        await save_max_model_len_while_ready(pilot, app)
        assert "takes effect when it restarts" in message(app)
        assert client.actions == []
        await pilot.press("r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        # the main screen's own restart action: a stop then a start (client.restart in older consoles)
        assert await wait_until(pilot, lambda: client.actions == ["stop", "start"])
    assert "max_model_len = 4096" in cfg.read_text()


async def test_a_console_key_while_ready_needs_no_restart(cfg):
    app, client = make(cfg, state=READY)
    async with app.run_test(size=(150, 45)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await open_at(pilot, app, "console.on_exit")
        await edit(pilot, app, "keep")
        assert await wait_until(pilot, lambda: "saved to" in message(app))
        assert "Press r" not in message(app)
        await pilot.press("r")
        await pilot.pause(0.1)
        assert isinstance(app.screen, SettingsScreen) and client.actions == []
    assert 'on_exit = "keep"' in cfg.read_text() and app.settings.console["on_exit"] == "keep"


async def test_a_set_override_is_shown_and_not_written(cfg):
    app, client = make(cfg, state=READY, overrides=["server.max_model_len=2048"])
    async with app.run_test(size=(150, 45)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await open_at(pilot, app, "server.max_model_len")
        head = str(app.screen.query_one("#target", Static).render())
        assert "--set for this run: server.max_model_len=2048" in head
        assert "--set" in str(app.screen.query_one("#detail", Static).render())
        await pilot.press("enter")
        assert editor(app).value == "8192", "the file's value, not the override"
        await pilot.press("escape")
        await edit(pilot, app, "4096")
        assert await wait_until(pilot, lambda: "saved to" in message(app))
        assert "this run keeps 2048" in message(app) and "Press r" not in message(app)
    assert "max_model_len = 4096" in cfg.read_text() and "2048" not in cfg.read_text()
    assert app.settings.server["max_model_len"] == 2048


async def test_demo_values_are_edited_in_the_demo_settings_file(cfg, tmp_path, monkeypatch):
    from backend import demo

    monkeypatch.setattr(demo, "ensure_model", lambda: tmp_path / "demo-model")
    before = cfg.read_text()
    app, _ = make(cfg, demo=True)
    async with app.run_test(size=(150, 45)) as pilot:
        await open_at(pilot, app, "server.gpu_memory_utilization")
        target = str(app.screen.query_one("#target", Static).render())
        assert str(demo.settings_path()) in target and "demo settings file" in target
        await pilot.press("enter")
        assert editor(app).value == "0.2", "the value the demo runs with, not the file's"
        await pilot.press("escape")
        await edit(pilot, app, "0.25")
        assert await wait_until(pilot, lambda: "saved to" in message(app))
        assert "demo settings file" in message(app) and "this run keeps" not in message(app)
    assert cfg.read_text() == before
    assert "gpu_memory_utilization = 0.25" in demo.settings_path().read_text()
    assert app.settings.server["gpu_memory_utilization"] == 0.25


async def test_a_theme_saved_applies_now(cfg):
    app, _ = make(cfg)
    async with app.run_test(size=(150, 45)) as pilot:
        assert app.theme == "qwen-dark"
        await open_at(pilot, app, "console.theme")
        await edit(pilot, app, '"textual-light"')
        assert await wait_until(pilot, lambda: app.theme == "textual-light")
        assert "used now" in message(app)
        # its colours too: the stylesheet reparsed with the new theme's variables (tui/themes.py)
        light = Color.parse(app.get_theme("textual-light").background).hex
        assert await wait_until(pilot, lambda: app.main_screen.styles.background.hex == light)
    assert 'theme = "textual-light"' in cfg.read_text()


async def test_saved_but_not_restarted_marks_the_ledger_as_ahead_of_the_server(cfg):
    from tui.widgets.ledger_panel import LedgerPanel

    app, client = make(cfg, state=READY)
    async with app.run_test(size=(150, 45)) as pilot:
        await save_max_model_len_while_ready(pilot, app)
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        panel = app.screen.query_one(LedgerPanel)
        assert await wait_until(pilot, lambda: "restart to apply" in str(panel.border_subtitle))
        assert client.actions == []


async def test_at_80_columns_a_row_drops_the_default_column_and_keeps_the_help(cfg):
    """At 80x24 a row was ~90 columns: 'defa…' was all of the default and none of the help showed."""
    for size, wide in (((80, 24), False), ((160, 48), True)):
        app, _ = make(cfg)
        async with app.run_test(size=size) as pilot:
            await open_at(pilot, app, "server.max_model_len")
            await pilot.pause()
            rows = app.screen.query_one(OptionList)
            strips = app.screen._compositor.render_strips()
            r = rows.region
            shown = [s.text[r.x:r.right] for s in strips[r.y:r.bottom]]
            line = next(ln for ln in shown if "max_model_len" in ln)
            help_text = app.screen.rows["server.max_model_len"].spec.help
            assert ("default " in line) is wide, line
            assert "defa…" not in line and help_text[:8] in line, line
            await pilot.press("escape")


async def test_at_80_columns_a_sections_keys_take_only_that_sections_width(cfg):
    """The key column was the whole schema's widest key (26) in every section: [chat]'s 13-letter keys
    sat 13 blanks from their values at 80 columns, which the help paid for."""
    app, _ = make(cfg)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_at(pilot, app, "chat.system_prompt")
        await pilot.pause()
        rows = app.screen.query_one(OptionList)
        strips = app.screen._compositor.render_strips()
        r = rows.region
        shown = [s.text[r.x:r.right] for s in strips[r.y:r.bottom]]
        line = next(ln for ln in shown if "system_prompt" in ln)
        after = line.split("system_prompt", 1)[1]
        assert after.startswith(" ") and not after.startswith("  "), line  # one blank, then the value
