"""HistoryScreen (key h): the flight recorder's last hour or day (backend/history.py) as one sparkline
per figure, with the server's events marked on the time axis. Fits 80×24: one column per time slice.
1: the last hour, 2: the last day, r: read again (it also reads every REFRESH_S), esc: close."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from tui.messages import HistoryRead
from tui.palette import style
from tui.screens.dialog import Dialog

REFRESH_S = 5.0
WINDOWS = {"1": ("last hour", 3600.0), "2": ("last day", 86400.0)}
LABEL_W, VALUE_W = 12, 11
BLOCKS = "▁▂▃▄▅▆▇█"
GiB = 2**30
# (label, bin key, scale, format of the largest value): what a row shows
SERIES: list[tuple[str, str, float, str]] = [
    ("running", "running_max", 1, "{:.0f}"),
    ("waiting", "waiting_max", 1, "{:.0f}"),
    ("KV cache", "kv_cache_usage_max", 100, "{:.0f} %"),
    ("gen tok/s", "generation_tokens_per_s", 1, "{:,.0f}"),
    ("TTFT p50", "ttft_p50_s", 1000, "{:,.0f} ms"),
    ("TTFT p99", "ttft_p99_s", 1000, "{:,.0f} ms"),
    ("queue p99", "queue_p99_s", 1000, "{:,.0f} ms"),
    ("HTTP errors", "http_errors", 1, "{:.0f}"),
    ("preemptions", "preemptions", 1, "{:.0f}"),
    ("GPU memory", "gpu_memory_used_bytes_max", 1 / GiB, "{:.1f} GiB"),
    ("GPU power", "gpu_power_w_mean", 1, "{:.0f} W"),
]
# event kind -> (mark, rank: the worst of a slice is shown)
MARKS = {"failed": ("F", 0), "died": ("F", 0), "restart": ("↻", 1), "idle_sleep_failed": ("!", 1), "backoff": ("B", 2),
         "stopped": ("x", 3), "stopping": ("x", 4), "sleeping": ("z", 5), "idle_sleep": ("z", 5),
         "ready": ("R", 6), "starting": ("S", 7)}
SHIFT_MOST = 2
LEGEND = "S start  R ready  F failed/died  ↻ restart  z sleep  x stop"


def spark(values: list[float | None], top: float | None = None) -> str:
    """One character per slice, scaled to the largest (or `top`): '·' where the slice has no sample, ' ' for
    zero or a slice with samples but no such figure (NaN: no request, so no TTFT)."""
    known = [v for v in values if v is not None and not math.isnan(v)]
    hi = top if top is not None else max(known, default=0.0)
    out = []
    for v in values:
        if v is None:
            out.append("·")
        elif math.isnan(v) or v <= 0 or hi <= 0:
            out.append(" ")
        else:
            out.append(BLOCKS[min(len(BLOCKS) - 1, max(0, int(v / hi * (len(BLOCKS) - 1) + 0.5)))])
    return "".join(out)


def event_row(events: list[dict[str, Any]], start: float, end: float, n: int) -> str:
    """One mark per slice. Events that share a slice (a failure and its restart seconds apart) take the
    next free slice, up to SHIFT_MOST along; past that the worst of them is shown."""
    row, ranks = [" "] * n, [99] * n
    width = (end - start) / max(1, n)
    for e in sorted(events, key=lambda e: e["t"]):
        mark, rank = MARKS.get(e["kind"], ("•", 8))
        i = min(n - 1, max(0, int((e["t"] - start) / width)))
        free = next((j for j in range(i, min(n, i + SHIFT_MOST + 1)) if ranks[j] == 99), None)
        if free is not None:
            row[free], ranks[free] = mark, rank
        elif rank < ranks[i]:
            row[i], ranks[i] = mark, rank
    return "".join(row)


def chart_lines(win: Any, width: int, title: str, app: Any = None) -> list[Text | str]:
    """The whole view as lines of at most `width` cells (pure: tested without a screen)."""
    from backend import history  # the screen's first use: not before the console's first frame

    # the value column as wide as its widest "max …" (at least VALUE_W): cut to a fixed width,
    # "max 4,870 ms" lost its unit at 80 columns. Its width comes from a first binning; the
    # sparklines then take what is left
    value_w = VALUE_W
    for _ in range(2):
        n = max(8, width - LABEL_W - value_w - 1)
        binned = history.bins(win, n)
        rows = []
        for label, key, scale, vfmt in SERIES:
            vals = [None if not b["samples"] else math.nan if b[key] is None else float(b[key]) * scale
                    for b in binned]
            top = max((v for v in vals if v is not None and not math.isnan(v)), default=None)
            shown = "-" if top is None else vfmt.format(top)
            if key == "kv_cache_usage_max" and top is not None and 0 < top < 0.5:
                shown = "<1 %"  # a sliver in use, as the sweep says it: not "0 %"
            rows.append((label, key, vals, top, "max " + shown))
        need = max(len(r[4]) for r in rows) + 1
        if need <= value_w:
            break
        value_w = need
    value_w = max(value_w, need)
    span = win.end - win.start
    fmt = "%H:%M" if span <= 86400 else "%m-%d"
    left, mid = time.strftime(fmt, time.localtime(win.start)), time.strftime(fmt, time.localtime(win.start + span / 2))
    axis = left + mid.center(n - len(left) * 2) + "now"
    lines: list[Text | str] = [Text(f"{title}: {len(win.samples)} samples, {len(win.events)} events", "bold")]
    lines.append(" " * LABEL_W + axis[:n])
    lines.append(Text("events".ljust(LABEL_W)) + Text(event_row(win.events, win.start, win.end, n), "bold"))
    for label, key, vals, top, shown in rows:
        line = Text(label.ljust(LABEL_W)) + Text(spark(vals, 100.0 if key == "kv_cache_usage_max" else None),
                                                 style(app, "error") if key == "http_errors" and top else "bold")
        lines.append(line + Text(" " + shown.rjust(value_w - 1), "dim"))
    tot = history.summarize(win.samples)
    http = " ".join(f"{k}:{v}" for k, v in tot["http_requests"].items()) or "none"
    lines.append(Text(f"{tot['requests_finished']:.0f} finished  HTTP {http}"[:width], "dim"))
    lines.append(Text(LEGEND[:width], "dim"))
    return lines


class HistoryScreen(Dialog[None]):
    CSS_PATH = "history.tcss"
    BINDINGS = [Binding("1", "window('1')", "Last hour", id="hour"),
                Binding("2", "window('2')", "Last day", id="day"),
                Binding("r", "reload", "Read again", id="reload"),
                Binding("escape", "dismiss", "Close", id="close")]
    KEYS = "1: last hour  2: last day  r: read again  esc: close"

    def __init__(self) -> None:
        super().__init__()
        self.window_key = "1"
        self.lines: list[str] = []  # what is shown, as plain text (tests)
        self.window: Any = None

    def compose_body(self) -> ComposeResult:
        yield Static("reading the flight recorder…", id="chart")

    def on_mount(self) -> None:
        self.read_history()

    @work(group="history", exclusive=True, exit_on_error=False)
    async def read_history(self) -> None:
        from backend import history, recorder  # the screen's first use (start-up)
        from backend.server import statefile  # the screen's first use (start-up)

        path = recorder.db_path(statefile.state_path().parent)
        while True:
            label, since = WINDOWS[self.window_key]
            try:
                win = await asyncio.to_thread(history.load, path, since)
                self.post_message(HistoryRead(win, label))
            except history.HistoryError as e:
                self.post_message(HistoryRead(None, label, error=str(e)))
            await asyncio.sleep(REFRESH_S)

    @on(HistoryRead)
    def show(self, message: HistoryRead) -> None:
        chart = self.query_one("#chart", Static)
        if message.error:
            self.lines = [message.error]
            chart.update(Text(message.error, style(self.app, "error")))
            return
        self.window = message.window
        width = max(20, chart.content_region.width or self.app.size.width - 4)
        lines = chart_lines(message.window, width, message.label, self.app)
        self.lines = [str(x) for x in lines]
        chart.update(Text("\n").join(Text(x) if isinstance(x, str) else x for x in lines))

    def action_window(self, key: str) -> None:
        self.window_key = key
        self.read_history()

    def action_reload(self) -> None:
        self.read_history()
