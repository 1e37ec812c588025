"""Issue 28's newcomer pass at 80×24: the pull dialog's field has focus as it opens (letters are text,
enter submits), and the screens named there show their keys line whole."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Input, Static

from backend.server.client import Poll
from tests.helpers.console import PARSED, READY, app_with, wait_until
from tui.screens.pull import PullScreen


async def test_g_opens_with_the_repo_field_focused_and_letters_are_text(qhome):
    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome, "server.model=/models/local")
    notes: list[str] = []
    async with app.run_test(size=(80, 24)) as pilot:
        real = app.notify
        app.notify = lambda msg, **kw: (notes.append(msg), real(msg, **kw))  # type: ignore[method-assign]
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        await pilot.press("g")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PullScreen))
        repo = app.screen.query_one("#repo", Input)
        assert await wait_until(pilot, lambda: repo.has_focus)
        await pilot.press(*"uck")  # the dialog's own keys (u, c, k) would fire without a focused field
        assert repo.value == "uck"
        assert not [n for n in notes if "pull" in n], notes
        await pilot.press("enter")  # submits: the repo id is checked and its fault said
        assert await wait_until(pilot, lambda: bool(notes))
        assert isinstance(app.screen, PullScreen) and "pull" not in notes[-1]


def _overlaps(a, b) -> bool:
    return a.x < b.right and b.x < a.right and a.y < b.bottom and b.y < a.bottom


async def test_at_80x24_a_toast_leaves_the_chat_input_its_context_line_and_the_keys_line_clear(qhome):
    from textual.widgets._toast import Toast

    from tui.widgets.chat_pane import ChatPane
    from tui.widgets.keys_footer import KeysFooter

    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.press("c")
        pane = app.screen.query_one(ChatPane)
        assert await wait_until(pilot, lambda: pane.built and app.screen.query("#chat-input"), tries=100)
        app.notify("a toast long enough to wrap over two or three lines of the narrow screen " * 2, timeout=30)
        assert await wait_until(pilot, lambda: any(t.region.area for t in app.screen.query(Toast)), tries=100)
        toast = app.screen.query(Toast).first().region
        for widget in (app.screen.query_one("#chat-input"), app.screen.query_one("#chat-budget"),
                       app.screen.query_one(KeysFooter)):
            assert not _overlaps(toast, widget.region), f"the toast {toast} covers {widget} {widget.region}"


def _squash(text: str) -> str:
    return "".join(text.split())


async def _cut_statics(app, pilot, root) -> list[str]:
    """Each Static under `root`, scrolled into view: the text the screen shows in its region, when it is
    not the widget's whole text."""
    from tests.console.test_console_layout import region_text

    cut = []
    for w in list(root.query(Static)):
        if not w.display or not w.region.area:
            continue
        w.scroll_visible(animate=False, immediate=True)
        await pilot.pause(0.05)
        content = w.content
        if not isinstance(content, (str, Text)):
            continue  # a table (the figures, the ledger): test_console_layout checks its numbers
        text = _squash(str(content))
        shown = _squash("".join(region_text(app, w)))
        if text and text not in shown and shown not in ("", text):
            cut.append(f"{w.id or w.classes}: {text[:60]!r}… shows {shown[:60]!r}…")
    return cut


async def test_i_at_80x24_scrolls_its_panels_at_once_and_shows_the_gpu_line_whole(qhome):
    from tests.console.test_console_layout import region_text
    from tui.widgets.keys_footer import KeysFooter
    from tui.widgets.side_panels import SidePanels

    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.plan is not None, tries=200)
        await pilot.press("i")
        side = app.screen.query_one(SidePanels)
        assert await wait_until(pilot, lambda: side.has_focus and side.region.area)
        assert side.max_scroll_y > 0, "taller than the screen at 80×24: the test needs it to scroll"
        keys = _squash("".join(region_text(app, app.screen.query_one(KeysFooter))))
        assert "↑↓scroll" in keys and "iclosepanels" in keys, keys
        await pilot.press("pagedown")  # no tab first
        assert await wait_until(pilot, lambda: side.scroll_y > 0)
        gpus = app.screen.query_one("#gpus")
        assert await wait_until(pilot, lambda: bool(gpus.query(Static)), tries=100)
        assert not await _cut_statics(app, pilot, side)
        line = gpus.query(Static).first()
        assert _squash("".join(region_text(app, line))) == _squash(str(line.render()))
        await pilot.press("i")
        assert await wait_until(pilot, lambda: not side.region.area and not side.has_focus)


async def test_at_100x30_the_gpu_line_in_the_side_column_is_whole(qhome):
    """It wraps to two rows in the side column; its box (a Vertical, 1fr) had one."""
    from tests.helpers.console import NoNvml
    from tui.app import make_app

    _, client = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    app = make_app(app_with([], qhome)[0].settings, client, gpus=NoNvml())
    async with app.run_test(size=(100, 30)) as pilot:
        gpus = app.screen.query_one("#gpus")
        assert await wait_until(pilot, lambda: bool(gpus.query(Static)), tries=100)
        line = gpus.query(Static).first()
        await pilot.pause(0.1)
        assert line.region.height == 2, "the test needs the line to wrap"
        assert gpus.region.height >= line.region.height, f"{gpus.region} holds {line.region}"


def _keys_whole(app) -> bool:
    from tests.console.test_console_layout import region_text

    keys = app.screen.query_one("#keys")
    return bool(keys.region.area) and _squash("".join(region_text(app, keys))) == _squash(str(keys.render()))


async def test_b_after_a_run_at_80x24_keeps_its_keys_line_and_scrolls_its_results(qhome):
    """A STUB OpenAI server (tests/helpers/stub_openai.py), not vLLM: the run's figures and notes only."""
    from tests.helpers.stub_openai import StubServer
    from tui.screens.bench import BenchScreen

    srv = StubServer(tokens=16).start()
    try:
        state = {"state": "ready", "base_url": srv.base_url, "served_model_name": "stub-model"}
        app, _ = app_with([Poll(state=state, parsed=PARSED)], qhome, f"server.port={srv.port}")
        async with app.run_test(size=(80, 24)) as pilot:
            assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
            await pilot.press("b")
            assert await wait_until(pilot, lambda: isinstance(app.screen, BenchScreen))
            assert await wait_until(pilot, lambda: app.screen.report is not None, tries=400)
            await pilot.pause(0.3)
            assert _keys_whole(app), "the keys line (r, +/-, w, esc) is on screen after a run"
            box = app.screen.query_one("#results-box")
            assert box.max_scroll_y > 0, "the test needs results taller than the dialog"
            box.scroll_end(animate=False, immediate=True)
            await pilot.pause(0.1)
            assert box.scroll_y == box.max_scroll_y
    finally:
        srv.stop()


async def test_w_at_80x24_shows_every_column_to_kv_peak_both_plot_titles_the_axis_and_its_keys(qhome):
    """A FAKE scheduler (tests/helpers/sweep.py, httpx.MockTransport), not vLLM."""
    import httpx

    from backend.bench import sweep
    from tests.console.test_console_layout import region_text
    from tests.helpers.sweep import FakeScheduler
    from tui.screens.sweep import SweepScreen

    state = {"state": "ready", "base_url": "http://127.0.0.1:8000", "served_model_name": "qwen2.5-14b"}
    app, _ = app_with([Poll(state=state)], qhome)
    cfg = sweep.SweepConfig([1, 4, 8, 16, 32], input_tokens=20, output_tokens=6, requests_per_level=4)
    plan = {"max_concurrency": 2.0, "decode_tokens_per_s_ceiling": 50.0, "kv_cache_tokens": 1000}
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        screen = SweepScreen(state, plan, cfg, transport=httpx.MockTransport(FakeScheduler(seqs=2, delay=0.001)),
                             save_dir=qhome / "sweeps")
        app.push_screen(screen)
        assert await wait_until(pilot, lambda: screen.result is not None, tries=300)
        await pilot.pause(0.5)
        assert _keys_whole(app)
        shown = "\n".join(s.text for s in app.screen._compositor.render_strips())
        assert "KV peak" in shown and "queued" in shown
        assert "total tok/s vs conc." in shown and "mean TTFT ms vs conc." in shown
        plots = "".join(region_text(app, screen.query_one("#plots")))
        assert " 1 4 " in plots.replace("  ", " ") and "32" in plots, "the x axis: the levels swept"


def test_the_error_filter_keeps_errors_and_tracebacks_not_a_warning_that_names_an_error():
    from tui.widgets.log_pane import keep_line

    warn = "(APIServer pid=1) WARNING 12-02 01:02:03 [config.py:12] ValueError raised by a plugin: ignored"
    err = "(EngineCore_0 pid=2) ERROR 12-02 01:02:03 [core.py:9] EngineCore failed to start."
    info = "(APIServer pid=1) INFO 12-02 01:02:03 [api.py:1] Error rate metrics enabled"
    bare = ["Traceback (most recent call last):", '  File "x.py", line 3, in <module>', "RuntimeError: boom"]
    assert [keep_line(x, "error", "") for x in (warn, err, info, *bare)] == [False, True, False, True, True, True]
    assert [keep_line(x, "warning", "") for x in (warn, err, info)] == [True, True, False]


async def test_log_lines_wider_than_the_pane_say_so_on_its_border(qhome):
    from tui.widgets.log_pane import LogPane

    lines = [f"INFO 12-02 01:02:03 [core.py:{i}] " + "a long log line " * 8 + "end" for i in range(5)]
    app, _ = app_with([Poll(state=READY, parsed=PARSED, lines=lines)], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.screen.query_one(LogPane)
        assert await wait_until(pilot, lambda: log.line_count >= 5)
        assert await wait_until(pilot, lambda: log.border_subtitle == "→ more to the right")
        log.scroll_to(x=10, animate=False, immediate=True)
        assert await wait_until(pilot, lambda: log.border_subtitle.startswith("← column 11"))


def test_startup_figures_say_unknown_as_unknown_and_small_times_with_their_digits():
    from tui.widgets.figures_panel import rows

    got = dict(rows({"weights_seconds": 0.02}))
    assert got["weights"] == "size unknown, 0.02 s"
    assert got["KV cache"] == "—" and got["CUDA graphs"] == "—" and got["init engine"] == "—"
    assert dict(rows({"weights_gib": 27.5, "weights_seconds": 8.04}))["weights"] == "27.50 GiB in 8.0 s"
    assert dict(rows({"weights_gib": 0.25}))["weights"] == "0.25 GiB (load time unknown)"
    assert dict(rows({"max_concurrency": 3.5}))["max concurrency"] == "3.50x"
    assert not any(v.startswith("—") and len(v) > 1 for v in dict(rows({})).values())


async def test_a_settled_server_is_polled_less_often_than_one_that_is_starting(qhome):
    """Most of an idle console's CPU was its 5 polls a second beside a READY server (issue 28 point 10)."""
    import time

    counts = {}
    for state in ({"state": "ready"}, {"state": "starting"}):
        app, client = app_with([Poll(state=state, parsed=PARSED)], qhome)
        calls = []
        real = client.poll
        client.poll = lambda real=real, calls=calls: (calls.append(time.monotonic()), real())[1]
        async with app.run_test(size=(80, 24)) as pilot:
            assert await wait_until(pilot, lambda calls=calls: len(calls) >= 2, tries=100)
            start = len(calls)
            await pilot.pause(2.0)  # a rate: polls in two seconds
            counts[state["state"]] = len(calls) - start
    assert counts["ready"] <= 6, counts  # 0.5 s apart
    assert counts["starting"] >= counts["ready"] + 2, counts  # 0.2 s apart
async def test_the_demos_chat_says_its_model_has_random_weights(qhome, monkeypatch):
    from backend import demo
    from tui.widgets.chat_pane import ChatPane

    monkeypatch.setattr(demo, "ensure_model", lambda: qhome / "demo-model")
    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    app.settings = __import__("backend.settings", fromlist=["load"]).load(demo=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("c")
        pane = app.screen.query_one(ChatPane)
        assert await wait_until(pilot, lambda: pane.built, tries=100)
        head = str(pane.query_one("#chat-log").query(Static).first().render())
        assert head.startswith("demo model: random weights")
        await pilot.press("ctrl+n")
        assert await wait_until(pilot, lambda: "new conversation" in str(
            pane.query_one("#chat-log").query(Static).first().render()))
        assert str(pane.query_one("#chat-log").query(Static).first().render()).startswith("demo model: random")
