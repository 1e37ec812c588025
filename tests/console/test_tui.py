"""Pilot tests of the console, fed by a scripted client (no server, no supervisor)."""

from __future__ import annotations

import pytest

from backend.server.client import Poll
from backend.settings import load
from tests.helpers.console import PARSED, READY, ScriptedClient, app_with, wait_until
from tui.app import make_app
from tui.screens.quit import QuitScreen
from tui.widgets.failure_banner import FailureBanner
from tui.widgets.log_pane import LogPane
from tui.widgets.status_bar import StatusBar

STARTUP = [
    "(APIServer pid=1) INFO 11-29 08:33:18 [api_utils.py:347]   version 0.32.0",
    "(Worker pid=3) INFO 11-29 08:34:03 [default_loader.py:501] Loading weights took 0.02 seconds",
    '(APIServer pid=1) INFO:     127.0.0.1:5555 - "GET /health HTTP/1.1" 200 OK',
    "(EngineCore pid=2) INFO 11-29 08:34:50 [kv_cache_utils.py:2327] CPU KV cache size: 1,309,184 tokens, "
    "Maximum concurrency for 2,048 tokens per request: 639.25x",
    "INFO:     Application startup complete.",
]


async def test_log_status_and_figures_follow_the_source(qhome):
    polls = [Poll(state={"state": "starting", "detail": "pid 1"}, lines=STARTUP[:2], new_log=True),
             Poll(state=READY, lines=STARTUP[2:], parsed=PARSED)]
    app, _ = app_with(polls, qhome)
    async with app.run_test(size=(140, 40)) as pilot:
        log = app.screen.query_one(LogPane)
        assert await wait_until(pilot, lambda: "READY" in app.screen.query_one(StatusBar).last_text)
        lines = list(log.lines)
        assert lines[0].endswith("version 0.32.0")
        assert any("Application startup complete" in ln for ln in lines)
        assert not any("GET /health" in ln for ln in lines), "poll noise must stay out of view"
        assert log.hidden_polls == 1
        status = app.screen.query_one(StatusBar).last_text
        assert "qwen2.5-14b" in status and "http://127.0.0.1:8000" in status
        figures = dict(__import__("tui.widgets.figures_panel", fromlist=["rows"]).rows(PARSED))
        assert figures["KV tokens"] == "1,309,184"
        assert figures["max concurrency"] == "639.25x @ 2,048 tok"
        assert not app.screen.query(FailureBanner)  # made with the first failure shown (issue 28)


async def test_keys_start_stop_restart_reach_the_client(qhome):
    app, client = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test() as pilot:
        for key, action in (("s", "start"), ("x", "stop"), ("r", "start")):
            await pilot.press(key)
            assert await wait_until(pilot, lambda action=action: client.actions and client.actions[-1] == action)
            assert await wait_until(pilot, lambda: not app.screen.busy)
        assert client.actions == ["start", "stop", "stop", "start"]  # restart: stop, look, start


async def test_failure_banner_shows_the_fix(qhome):
    failure = {"kind": "kv_cache_too_small", "message": "max seq len 32768 > KV cache 12784 tokens",
               "fix": "set server.max_model_len = 12784"}
    app, _ = app_with([Poll(state={"state": "failed", "failure": failure}, parsed={"phase": "failed"})], qhome)
    async with app.run_test() as pilot:
        banner = app.screen.query_one(FailureBanner)
        assert await wait_until(pilot, lambda: banner.has_class("-shown"))
        assert "server.max_model_len = 12784" in str(banner.render())
        assert "FAILED: kv_cache_too_small" in str(banner.render())


async def test_a_failure_nobody_diagnosed_is_a_bare_failed(qhome):
    failure = {"kind": "unknown", "message": "vLLM killed by signal 9 (SIGKILL)", "fix": "see the log"}
    app, _ = app_with([Poll(state={"state": "failed", "failure": failure}, parsed={"phase": "failed"})], qhome)
    async with app.run_test() as pilot:
        banner = app.screen.query_one(FailureBanner)
        assert await wait_until(pilot, lambda: banner.has_class("-shown"))
        shown = str(banner.render())
        assert shown.startswith("FAILED\n") and "unknown" not in shown and "signal 9 (SIGKILL)" in shown


@pytest.mark.parametrize("choice, stopped", [("k", False), ("s", True)])
async def test_quit_asks_keep_or_stop_when_running(qhome, choice, stopped):
    app, client = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test() as pilot:
        assert await wait_until(pilot, lambda: "READY" in app.screen.query_one(StatusBar).last_text)
        await pilot.press("q")
        assert await wait_until(pilot, lambda: isinstance(app.screen, QuitScreen))
        await pilot.press(choice)
        assert await wait_until(pilot, lambda: app.quit_choice is not None)
        await pilot.pause(0.2)
    assert app.quit_choice == ("stop" if stopped else "keep")
    assert ("stop" in client.actions) == stopped


async def test_quit_when_stopped_does_not_ask(qhome):
    app, client = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test() as pilot:
        await pilot.pause(0.1)
        await pilot.press("q")
        await pilot.pause(0.1)
    assert app.quit_choice == "keep" and client.actions == []


async def test_gpu_panel_shows_the_recorded_h200(qhome):
    from backend.gpu import GpuMonitor
    from tests.helpers.nvml_fake import FakeNvml
    from tui.widgets.gpu_panel import GpuPanel, rows

    gpus = GpuMonitor(nvml=FakeNvml())
    assert gpus.available()
    settings = load(overrides=["console.gpu_interval_s=0.1"])
    app = make_app(settings, ScriptedClient([Poll(state={"state": "stopped"})]), gpus)
    async with app.run_test(size=(160, 48)) as pilot:
        assert await wait_until(pilot, lambda: len(app.screen.query(GpuPanel)) == 1)
        panel = app.screen.query_one(GpuPanel)
        assert panel.border_title == "GPU 0 · NVIDIA H200"
    values = {k: str(v) for k, v in rows(gpus.sample()[0])}
    assert values["memory"].endswith("0.0 / 140.4 GiB")  # memory v2, as nvidia-smi shows it
    assert values["PCIe"] == "Gen5/5 x16/16"
    assert values["power"] == "95 W / 700 W" and values["temp"] == "37 °C"


async def test_no_nvml_says_why(qhome):
    class NoGpu:
        def available(self):
            return False

        reason = "libnvidia-ml.so.1 not found: no NVIDIA driver on this machine"

    app = make_app(load(), ScriptedClient([Poll(state={"state": "stopped"})]), NoGpu())
    async with app.run_test() as pilot:
        def gpu_text() -> str:
            return " ".join(str(w.render()) for w in app.screen.query("#gpus Static"))

        # NVML is opened in a thread after the first frame: wait for its answer, not for a time
        assert await wait_until(pilot, lambda: "no NVIDIA driver" in gpu_text()), gpu_text()


async def test_ledger_panel_puts_the_plan_beside_the_log(qhome):
    """The repo's 14B/TP=2 plan beside scripted log figures; a >5% difference is marked."""
    from tui.widgets.ledger_panel import LedgerPanel

    parsed = dict(PARSED, kv_cache_tokens=67_000, max_concurrency=5.0, kv_cache_gib=6.1)
    app, _ = app_with([Poll(state=READY, parsed=parsed)], qhome)
    async with app.run_test(size=(160, 48)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.plan is not None, tries=100)
        assert app.screen.plan["kv_bytes_per_token"] == 196_608
        assert app.screen.plan["kv_bytes_per_token_per_gpu"] == 98_304
        assert await wait_until(pilot, lambda: app.screen.parsed.get("kv_cache_tokens") == 67_000)
        from backend.ledger import compare
        rows = {r["name"]: r for r in compare(app.screen.plan, app.screen.parsed)}
        assert rows["KV cache tokens"]["off"] is False  # ~67k predicted (cold compile planned)
        assert rows["max concurrency"]["off"] is True  # 5.0x logged vs ~8x planned
        app.screen.query_one(LedgerPanel)


async def test_level_filter_and_search(qhome):
    lines = ["(APIServer pid=1) INFO 11-29 08:00:00 [a.py:1] fine",
             "(APIServer pid=1) WARNING 11-29 08:00:01 [a.py:2] careful",
             "(EngineCore pid=2) ERROR 11-29 08:00:02 [core.py:3] EngineCore failed to start.",
             "(APIServer pid=1) INFO 11-29 08:00:03 [a.py:4] KV cache size: 10 tokens"]
    app, _ = app_with([Poll(state={"state": "failed"}, lines=lines, new_log=True)], qhome)
    async with app.run_test(size=(140, 40)) as pilot:
        log = app.screen.query_one(LogPane)
        assert await wait_until(pilot, lambda: len(log.lines) == 4)
        await pilot.press("l")
        assert [ln.split()[2] for ln in log.lines] == ["WARNING", "ERROR"]
        await pilot.press("l")
        assert len(log.lines) == 1 and "failed to start" in log.lines[0]
        await pilot.press("l")
        assert len(log.lines) == 4
        await pilot.press("slash")
        await pilot.press(*"kv cache", "enter")
        assert list(log.lines) == ["08:00:03 API KV cache size: 10 tokens"]  # the prefix in the gutter
        assert "search 'kv cache'" in log.border_title
        await pilot.press("escape")
        assert len(log.lines) == 4


async def test_keys_sent_with_the_slash_at_once_are_the_search_text_not_commands(qhome):
    """`/vllm` pasted (or typed fast) arrives before the search box has the focus: the keys after
    the slash were the log's commands (`v` toggled the prefix, `l` the level) and the box stayed
    empty. Sent here as the terminal sends them: all queued before any is handled."""
    from textual import events
    from textual.widgets import Input

    lines = ["(APIServer pid=1) INFO 11-29 08:00:00 [a.py:1] fine",
             "(APIServer pid=1) INFO 11-29 08:00:03 [a.py:4] vllm KV cache size: 10 tokens"]
    app, _ = app_with([Poll(state={"state": "ready"}, lines=lines, new_log=True)], qhome)
    async with app.run_test(size=(140, 40)) as pilot:
        log = app.screen.query_one(LogPane)
        assert await wait_until(pilot, lambda: len(log.lines) == 2)
        compact, level = log.compact, log.level
        for key, char in [("slash", "/"), ("v", "v"), ("l", "l"), ("l", "l"), ("m", "m")]:
            app.post_message(events.Key(key, char))
        assert await wait_until(pilot, lambda: app.screen.query("#search")
                                and app.screen.query_one("#search", Input).has_focus)
        box = app.screen.query_one("#search", Input)
        await pilot.pause()
        assert box.value == "vllm" and (log.compact, log.level) == (compact, level)
        await pilot.press("enter")
        assert list(log.lines) == ["08:00:03 API vllm KV cache size: 10 tokens"]
        await pilot.press("escape", "v")  # the filters cleared, the letters are commands again
        assert log.compact != compact


async def test_a_filter_that_hides_every_line_says_so(qhome):
    lines = ["(APIServer pid=1) INFO 11-29 08:00:00 [a.py:1] fine",
             "(APIServer pid=1) INFO 11-29 08:00:03 [a.py:4] KV cache size: 10 tokens"]
    app, _ = app_with([Poll(state={"state": "ready"}, lines=lines, new_log=True)], qhome)
    async with app.run_test(size=(140, 40)) as pilot:
        log = app.screen.query_one(LogPane)
        assert await wait_until(pilot, lambda: len(log.lines) == 2)
        await pilot.press("l", "l")  # error and above: none
        assert list(log.lines) == ["no lines at error or above (of 2 lines kept); l: next level, esc: clear filters"]
        log.append_lines(["(EngineCore pid=2) ERROR 11-29 08:00:05 [core.py:3] boom"])
        assert len(log.lines) == 1 and "boom" in log.lines[0]  # the note gives way to the first line it lets in
        await pilot.press("escape")
        assert len(log.lines) == 3 and not log.placeholder


async def test_question_mark_toggles_the_keys_panel(qhome):
    from textual.widgets import HelpPanel

    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(150, 45)) as pilot:
        await pilot.press("question_mark")
        assert await wait_until(pilot, lambda: len(app.screen.query(HelpPanel)) == 1)
        await pilot.press("question_mark")
        assert await wait_until(pilot, lambda: len(app.screen.query(HelpPanel)) == 0)


async def test_at_80x24_the_keys_panel_shows_the_consoles_keys_not_eight_scroll_rows(qhome):
    # the log has focus; its Scroll Up/Down/Home/End/Page rows came first and pushed s, x, r, q … down
    from textual.widgets import HelpPanel

    from tests.console.test_console_layout import region_text
    from tui.widgets.log_pane import LogPane

    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        app.screen.query_one(LogPane).focus()  # as after the chat's esc esc
        assert await wait_until(pilot, lambda: isinstance(app.focused, LogPane))
        await pilot.press("question_mark")
        assert await wait_until(pilot, lambda: len(app.screen.query(HelpPanel)) == 1)
        await pilot.pause(0.1)
        shown = "\n".join(region_text(app, app.screen.query_one(HelpPanel)))
        for word in ("Start", "Stop", "Restart", "Quit", "Settings"):
            assert word in shown, shown
        assert "Scroll Up" not in shown and "Page Down" not in shown and "Scroll Right" in shown, shown
        await pilot.press("question_mark")
        log = app.screen.query_one(LogPane)
        log.write_lines([f"line {i}" for i in range(200)])
        log.scroll_home(animate=False)
        await pilot.pause()
        await pilot.press("down")
        assert await wait_until(pilot, lambda: log.scroll_y == 1), "down still scrolls the log"


async def test_the_last_attempts_failure_stays_on_screen_while_the_next_one_starts(qhome):
    """Issue 9: between two attempts the FAILED state lasts a moment; the banner keeps saying why
    the last one failed while the supervisor tries again, then clears when the server is READY."""
    from tui.widgets.failure_banner import FailureBanner

    last = {"attempt": 1, "kind": "memory_in_use", "message": "Free memory on device ... less than desired",
            "fix": "qwen-tui stop --orphans", "log_path": "/x/vllm-1.log"}
    polls = [Poll(state={"state": "starting", "attempt": 2, "last_failure": last})] * 20 + \
        [Poll(state=dict(READY, last_failure=last), parsed=PARSED)]
    app, _ = app_with(polls, qhome)
    async with app.run_test(size=(120, 40)) as pilot:
        banner = app.screen.query_one(FailureBanner)
        assert await wait_until(pilot, lambda: banner.has_class("-shown"))
        text = str(banner.render())
        assert "attempt 1 FAILED: memory_in_use" in text and "stop --orphans" in text
        assert banner.has_class("-earlier")
        assert await wait_until(pilot, lambda: not banner.has_class("-shown"), tries=100)


async def test_the_gc_the_start_turned_off_is_back_on_after_the_first_frame(qhome):
    """tui/entry.py turns the cyclic GC off for the start (issue 16); the console's app turns it
    back on once its first frame is out, and never leaves it off."""
    import gc

    app = make_app(load(), ScriptedClient([Poll(state={"state": "stopped"})]), freeze_gc=True)
    gc.disable()
    try:
        async with app.run_test() as pilot:
            assert await wait_until(pilot, gc.isenabled, tries=10)  # half a second: the first frame, not the 1 s timer
            assert app.screen.query_one(StatusBar).last_text.startswith("● STOPPED")
    finally:
        gc.enable()
        gc.unfreeze()  # the test process's: many apps share it


async def test_the_failure_banner_is_made_on_the_first_failure_under_the_status_bar(qhome):
    """Issue 28: no banner widget until a failure is shown (most starts never need one); made then,
    it sits under the status bar, and a READY server hides it again."""
    failure = {"kind": "kv_cache_too_small", "message": "max seq len 32768 > KV cache 12784 tokens",
               "fix": "set server.max_model_len = 12784"}
    polls = [Poll(state={"state": "stopped"})] * 5 + \
        [Poll(state={"state": "failed", "failure": failure}, parsed={"phase": "failed"})] * 5 + \
        [Poll(state=READY, parsed=PARSED)]
    app, _ = app_with(polls, qhome)
    async with app.run_test(size=(120, 40)) as pilot:
        assert not app.screen.query(FailureBanner)
        assert await wait_until(pilot, lambda: bool(app.screen.query(FailureBanner)))
        banner = app.screen.query_one(FailureBanner)
        assert await wait_until(pilot, lambda: banner.has_class("-shown"))
        ids = [w.id for w in app.screen.children]
        assert ids[ids.index("status") + 1] == "failure"
        assert "FAILED: kv_cache_too_small" in str(banner.render())
        assert await wait_until(pilot, lambda: not banner.has_class("-shown"), tries=100)


async def test_the_figure_strip_is_made_when_the_screen_first_narrows(qhome):
    """Issue 28: a wide start makes no strip (it is the side column in one line, hidden there); the
    first resize below 100 columns makes it, under the status bar, with the figures already in it."""
    from tui.widgets.figure_strip import FigureStrip

    app, _ = app_with([Poll(state=READY, parsed=PARSED)], qhome)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        assert not app.screen.query(FigureStrip)
        await pilot.resize_terminal(80, 24)
        assert await wait_until(pilot, lambda: bool(app.screen.query(FigureStrip)))
        strip = app.screen.query_one(FigureStrip)
        assert await wait_until(pilot, lambda: strip.display and "KV 1,309,184 tok" in strip.last_text)
        ids = [w.id for w in app.screen.children]
        assert ids[ids.index("status") + 1] == "strip"
        line = app.screen._compositor.render_strips()[strip.region.y].text
        assert "READY · KV 1,309,184 tok" in line, line
        await pilot.resize_terminal(120, 40)
        assert await wait_until(pilot, lambda: not strip.display)
