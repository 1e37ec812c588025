"""At TP=2 the console shows both workers with their rank: in the one-line strip at 80x24 (no GPU
panels on the CPU build), and as rows of the figures panel when the side column is open."""

from __future__ import annotations

from backend.server.client import Poll
from tests.helpers.console import PARSED, READY, app_with, wait_until
from tui.widgets.figure_strip import FigureStrip, strip_text
from tui.widgets.figures_panel import FiguresPanel

WORKERS = [{"pid": 7449, "rank": 0, "title": "VLLM::Worker_TP0", "rss_bytes": 1_785_376 << 10},
           {"pid": 7450, "rank": 1, "title": "VLLM::Worker_TP1", "rss_bytes": 1_800_904 << 10}]


async def test_two_workers_are_on_the_80x24_screen(qhome):
    state = dict(READY, supervisor_pid=1, workers=WORKERS)
    app, _ = app_with([Poll(state=state, parsed=PARSED)], qhome)
    async with app.run_test(size=(80, 24)) as pilot:
        strip = app.screen.query_one(FigureStrip)
        assert await wait_until(pilot, lambda: "TP1 7450" in strip.last_text)
        assert "TP0 7449 · TP1 7450" in strip.last_text and "GPU n/a" not in strip.last_text
        # whole on screen, not cut by the strip's ellipsis
        line = app.screen._compositor.render_strips()[strip.region.y].text
        assert "TP0 7449 · TP1 7450" in line, line
        await pilot.press("i")
        panel = app.screen.query_one(FiguresPanel)

        def panel_text() -> str:
            return "\n".join(s.text for s in app.screen._compositor.render_strips()[panel.region.y:panel.region.bottom])

        assert await wait_until(pilot, lambda: "pid 7450" in panel_text()), panel_text()
        text = panel_text()
        assert "TP0" in text and "pid 7449 · 1.7 GiB" in text and "pid 7450" in text, text


def test_the_strip_keeps_the_gpu_figure_where_there_are_gpus():
    assert strip_text("ready", PARSED, (10.0, 24.0), WORKERS).endswith("GPU 10.0/24.0 GiB")
    assert strip_text("ready", PARSED, None, None).endswith("GPU n/a")
    assert strip_text("starting", {}, None, [{"pid": 5, "rank": None}]).endswith("· worker 5")


def test_a_worker_with_no_rank_in_its_title_is_a_worker_not_tp_question_mark():
    # TP=1's worker is titled "VLLM::Worker" (no rank): the demo showed it as "TP?"
    from tui.widgets.figures_panel import worker_rows

    one = [{"pid": 12253, "rank": None, "title": "VLLM::Worker", "rss_bytes": 6 << 30}]
    assert worker_rows(one) == [("worker", "pid 12253 · 6.0 GiB")]
    assert [label for label, _ in worker_rows(WORKERS)] == ["TP0", "TP1"]
