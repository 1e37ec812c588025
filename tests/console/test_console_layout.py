"""The console from 80×24 to 200×60: numbers whole, the side column folded below 100 columns,
the footer ending with `?`, dialogs that keep their size whatever was opened before."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from backend.server.client import Poll
from tests.helpers import ROOT
from tests.helpers.console import PARSED, READY, app_with, wait_until
from tui.widgets.figure_strip import FigureStrip
from tui.widgets.figures_panel import FiguresPanel
from tui.widgets.keys_footer import KeysFooter, fit
from tui.widgets.ledger_panel import LedgerPanel

BIG = dict(PARSED, kv_cache_tokens=3_219_264, max_concurrency=393.0, kv_cache_gib=6.7, weights_gib=14.71,
           listen_url="http://127.0.0.1:8011")
SIZES = [(80, 24), (120, 36), (200, 60)]


def region_text(app, widget) -> list[str]:
    """What the screen shows inside the widget's region, line by line."""
    strips = app.screen._compositor.render_strips()
    r = widget.region
    return [strip.text[r.x:r.right] for strip in strips[r.y:r.bottom]]


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_no_number_is_cut_in_the_side_panels(qhome, size):
    app, _ = app_with([Poll(state=READY, parsed=BIG)], qhome)
    async with app.run_test(size=size) as pilot:
        assert await wait_until(pilot, lambda: app.screen.plan is not None, tries=200)
        ledger = app.screen.query_one(LedgerPanel)
        assert await wait_until(pilot, lambda: "3,219,264" in ledger.last_cells)
        if size[0] < 100:  # folded into the strip; i opens the panels over the log
            assert app.screen.query_one(FigureStrip).display
            assert "KV 3,219,264 tok" in app.screen.query_one(FigureStrip).last_text
            await pilot.press("i")
        await pilot.pause(0.3)
        app.screen.query_one("#side").scroll_to_widget(ledger, top=True, animate=False)
        await pilot.pause(0.3)
        text = "\n".join(region_text(app, ledger))
        assert "…" not in text, text
        for cell in ledger.last_cells:
            assert cell in text, f"{cell!r} is cut at {size}:\n{text}"
        app.screen.query_one("#side").scroll_home(animate=False)
        await pilot.pause(0.3)
        figures = "\n".join(region_text(app, app.screen.query_one(FiguresPanel)))
        assert "…" not in figures and "3,219,264" in figures and "393.00x" in figures, figures
        assert "8011" in figures.replace("\n", "").replace("│", "").replace(" ", ""), figures


async def test_every_ledger_label_keeps_to_one_line_in_a_40_column_panel(qhome):
    """100x30: the side column at its narrowest, with a scrollbar: 40 columns inside the panel."""
    app, _ = app_with([Poll(state=READY, parsed=BIG)], qhome)
    async with app.run_test(size=(100, 30)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.plan is not None, tries=200)
        ledger = app.screen.query_one(LedgerPanel)
        assert await wait_until(pilot, lambda: "3,219,264" in ledger.last_cells)
        await pilot.pause(0.3)
        width = ledger.content_region.width
        assert width <= 40, ledger.content_region
        # the panel's table as Rich lays it out at that width (the screen may show only part of it)
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(ledger.content)
        lines = console.export_text().splitlines()
        for label in ("weights/GPU", "KV GiB/GPU", "KV tokens", "max conc.", "KV B/tok/GPU", "KV B/token",
                      "decode tok/s"):
            row = next((ln for ln in lines if label in ln), None)
            assert row is not None, f"{label!r} wraps:\n" + "\n".join(lines)
            assert any(ch.isdigit() or ch == "—" for ch in row.split(label)[1]), row  # its figures beside it


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_the_footer_shows_what_fits_and_always_the_help_key(qhome, size):
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=size) as pilot:
        footer = app.screen.query_one(KeysFooter)
        assert await wait_until(pilot, lambda: footer.shown)
        await pilot.pause(0.2)
        line = region_text(app, footer)[0].rstrip()
        assert line.endswith("? keys"), line
        assert "s start" in line and "q quit" in line
        assert "▏" not in line


def test_fit_drops_keys_from_the_end_and_keeps_help():
    pairs = [("s", "start"), ("x", "stop"), ("e", "settings"), ("?", "keys")]
    assert fit(pairs, 200) == [("s", "start"), ("x", "stop"), ("e", "settings"), ("?", "keys")]
    assert fit(pairs, 24) == [("s", "start"), ("?", "keys")]


async def test_an_empty_log_says_how_to_start_in_its_place_until_there_is_one(qhome):
    from tui.widgets.log_pane import LogPane

    line = "(APIServer pid=12204) INFO 12-01 07:41:05 [api_server.py:1234] Starting vLLM API server"
    app, client = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        hint, log = app.screen.query_one("#log-hint"), app.screen.query_one(LogPane)
        assert hint.display and not log.display  # the empty box is not drawn (~3 ms of the first frame)
        assert "press s to start the server" in str(hint.render())
        client.polls.append(Poll(state={"state": "starting"}, lines=[line], new_log=True))
        assert await wait_until(pilot, lambda: log.display and not hint.display)
        assert len(log.lines) == 1


async def test_log_lines_keep_their_message_at_80_columns_and_p_shows_the_prefix(qhome):
    from tui.widgets.log_pane import LogPane

    line = "(APIServer pid=12204) INFO 12-01 07:41:05 [api_server.py:1234] Starting vLLM API server 0 on http://127.0.0.1:8011"
    app, _ = app_with([Poll(state={"state": "starting"}, lines=[line], new_log=True)], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.screen.query_one(LogPane)
        assert await wait_until(pilot, lambda: len(log.lines) == 1)
        assert log.lines[0].startswith("07:41:05 API Starting vLLM API server")
        await pilot.press("v")
        assert log.lines[0] == line


async def test_dialogs_keep_their_size_whatever_was_opened_before(qhome):
    """settings → doctor → settings → quit → settings: the settings dialog never moves or resizes
    (a bare #dialog in doctor.tcss and quit.tcss used to restyle it app-wide)."""
    from tui.screens.doctor import DoctorScreen
    from tui.screens.main import MainScreen
    from tui.screens.quit import QuitScreen
    from tui.screens.settings import SettingsScreen

    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(150, 45)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        regions = []

        async def open_and_close(key, screen_type):
            """key opens screen_type; esc goes back to the main screen."""
            await pilot.press(key)
            assert await wait_until(pilot, lambda: isinstance(app.screen, screen_type))
            await pilot.pause(0.2)
            if screen_type is SettingsScreen:
                regions.append(app.screen.query_one("#dialog").region)
            await pilot.press("escape")
            assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))

        for key, screen_type in [("e", SettingsScreen), ("d", DoctorScreen), ("e", SettingsScreen),
                                 ("q", QuitScreen), ("e", SettingsScreen)]:
            await open_and_close(key, screen_type)
        assert len(regions) == 3 and len(set(regions)) == 1, regions


def test_every_screen_stylesheet_is_nested_under_its_screen():
    """No bare rule in a screen's .tcss: each file is one `ScreenType { … }` block."""
    import re

    folder = ROOT / "tui" / "screens"
    for path in folder.glob("*.tcss"):
        css = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S).strip()
        top = re.match(r"^([A-Z]\w*Screen)\s*\{", css)
        assert top, f"{path.name}: does not start with a screen type"
        depth, closed_at = 0, None
        for i, ch in enumerate(css):
            depth += ch == "{"
            depth -= ch == "}"
            if depth == 0 and ch == "}":
                closed_at = i
                break
        assert closed_at == len(css) - 1, f"{path.name}: a rule outside `{top.group(1)} {{ … }}`"


def test_no_hard_coded_colour_names_in_the_console():
    """Colours come from theme variables, so both themes in themes/ colour everything."""
    import re

    names = re.compile(r"""["'](?:bold |italic )?(red|green|yellow|cyan|magenta|blue|white)\b""")
    root = ROOT / "tui"
    hits = [f"{p.name}: {m.group(0)}" for p in root.rglob("*.py") for m in names.finditer(p.read_text())]
    assert not hits, hits


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_the_doctor_table_fits_its_dialog(qhome, size):
    """The fix column (`qwen-tui stop --orphans`) was cut at 120 columns: the columns now share
    the dialog's width and wrap."""
    from textual.widgets import DataTable

    from tui.screens.doctor import DoctorScreen

    app, _ = app_with([Poll(state={"state": "stopped"})], qhome, "planner.device=cpu")
    async with app.run_test(size=size) as pilot:
        await pilot.press("d")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DoctorScreen))
        table = app.screen.query_one(DataTable)
        assert await wait_until(pilot, lambda: table.row_count >= 10, tries=200)
        await pilot.pause(0.2)
        assert table.virtual_size.width <= table.size.width, (table.virtual_size, table.size)


async def test_in_the_chat_the_footer_offers_f1_for_the_keys(qhome):
    from textual.widgets import HelpPanel

    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(120, 36)) as pilot:
        footer = app.screen.query_one(KeysFooter)
        await pilot.press("c")
        assert await wait_until(pilot, lambda: footer.shown and footer.shown[-1] == ("f1", "keys"))
        await pilot.press("f1")
        assert await wait_until(pilot, lambda: len(app.screen.query(HelpPanel)) == 1)
        assert app.screen.query_one("#chat-input").value == ""


@pytest.mark.parametrize("theme, success", [("qwen-dark", "#9ECE6A"), ("qwen-light", "#33635C")])
async def test_panel_colours_follow_the_theme(qhome, theme, success):
    from tui.palette import style
    from tui.widgets.status_bar import StatusBar

    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome, f"console.theme={theme}")
    async with app.run_test(size=(120, 36)) as pilot:
        bar = app.screen.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "READY" in bar.last_text)
        assert style(app, "success", "bold").upper() == f"BOLD {success}"
        rgb = "rgb({},{},{})".format(*(int(success[i:i + 2], 16) for i in (1, 3, 5)))
        spans = [str(s.style) for s in bar.render().spans]
        assert any(rgb in s for s in spans), spans  # ● READY in the theme's success colour


async def test_an_unknown_theme_is_said_once_the_console_runs(qhome):
    """The themes are registered before the app runs (one CSS pass less before the first frame);
    what went wrong there is still said, as a warning, once it runs."""
    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome, "console.theme=no-such-theme")
    notes: list[tuple[str, str]] = []
    real = app.notify
    app.notify = lambda msg, **kw: (notes.append((msg, kw.get("severity"))), real(msg, **kw))  # type: ignore
    async with app.run_test(size=(120, 36)) as pilot:
        assert await wait_until(pilot, lambda: notes)
        assert notes[0] == ("theme 'no-such-theme' not found; using textual-dark", "warning")
        assert app.theme == "textual-dark"


async def test_the_startup_timeline_ends_with_when_ready_came_not_an_ellipsis(qhome):
    """An H200 run showed '▸ ready …' under READY: ready is the end of the phases, not one under way."""
    timeline = [("starting", 100.0, 41.2), ("loading_weights", 141.2, 2.0), ("cuda_graphs", 143.2, 3.0),
                ("ready", 146.2, None)]
    app, _ = app_with([Poll(state=READY, parsed=BIG, timeline=timeline)], qhome)
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.screen.query_one(FiguresPanel)
        assert await wait_until(pilot, lambda: "ready" in "".join(region_text(app, panel)) and
                                "at 46.2 s" in "".join(region_text(app, panel)))
        text = "\n".join(region_text(app, panel))
        assert "41.2 s" in text and "…" not in text, text
    # a phase still under way keeps its ellipsis
    app, _ = app_with([Poll(state={"state": "starting"}, parsed=BIG, timeline=timeline[:2] + [("cuda_graphs", 143.2,
                                                                                               None)])], qhome)
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.screen.query_one(FiguresPanel)
        assert await wait_until(pilot, lambda: "cuda_graphs" in "".join(region_text(app, panel)))
        assert "…" in "\n".join(region_text(app, panel))


def test_a_tiny_figure_is_less_than_a_hundredth_not_zero():
    from tui.widgets.ledger_panel import _fmt

    assert _fmt(0.0035) == "<0.01" and _fmt(0.0) == "0.00" and _fmt(14.714) == "14.71" and _fmt(None) == "—"
    assert _fmt(3_219_264) == "3,219,264"


async def test_back_from_the_chat_to_the_hint_letters_are_commands_again(qhome):
    """With the hint in the log's place (the log hidden), esc esc from the chat leaves no hidden
    input holding the keys: `s` starts the server."""
    app, client = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("c")
        assert await wait_until(pilot, lambda: app.screen.view == "chat")
        await pilot.press("escape", "escape")
        assert await wait_until(pilot, lambda: app.screen.view == "log")
        assert app.screen.query_one("#log-hint").display
        await pilot.press("s")
        assert await wait_until(pilot, lambda: "start" in client.actions)
