"""SweepScreen: `qwen-tui bench --sweep` in the console (w in the load-test dialog): progress per
level, the table (the previous sweep's total tok/s and TTFT beside), and two plots against
concurrency: total output tok/s with the batch-1 decode ceiling, and mean TTFT, both with the
ledger's max concurrency drawn in. The result is saved (JSON + CSV) in the XDG data dir.
`r` runs again, `esc` stops the run and closes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Label, Static
from textual_plotext import PlotextPlot

from backend.bench.sweep import kv_percent
from tui.messages import SweepEvent, SweepFinished
from tui.palette import style
from tui.screens.dialog import Dialog

DEFAULT_LEVELS = (1, 4, 8, 16, 32)
# short headers: at 80 columns every column up to "queued" fits; the previous sweep's two come only
# when there is one
COLUMNS = ("conc", "TTFT ms", "p50", "p99", "tok/s/req", "tok/s", "req/s", "err", "KV peak",
           "queued", "prev tok/s", "prev TTFT", "J/token", "tok/s/W")
PREV = slice(10, 12)  # the previous sweep's columns in COLUMNS and table_row
SHORT_H = 40  # below this many rows the finished levels fold into the table (the plots need the room)


ENERGY = slice(12, 14)  # J/token and tok/s/W: only where NVML reads the GPUs' power


def without_prev(cells: tuple[str, ...]) -> tuple[str, ...]:
    """A row (or the headers) without the previous sweep's columns."""
    return cells[:PREV.start] + cells[PREV.stop:]


def shown(cells: tuple[str, ...], prev: bool, energy: bool) -> tuple[str, ...]:
    """A row (or the headers) with the previous sweep's columns where there is one, and the energy
    columns where GPU power can be read (without NVML they would say "unknown" in every row, and at
    80 columns push the table past the edge: the legend says it once instead)."""
    out = cells if energy else cells[:ENERGY.start] + cells[ENERGY.stop:]
    return out if prev else without_prev(out)


def theme_rgb(app: Any, name: str) -> tuple[int, int, int] | None:
    """A theme colour (error, warning, ...) as plotext's (r, g, b); None: plotext's own."""
    try:
        value = str(getattr(app.current_theme, name)).lstrip("#")
        return (int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16))
    except (AttributeError, TypeError, ValueError):
        return None


def _f(x: Any, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def _e(x: Any, spec: str) -> str:
    """An energy figure: "unknown" without NVML, never 0 or a dash that reads as 'none'."""
    return "unknown" if x is None else format(x, spec)


def table_row(row: dict[str, Any], prev: dict[str, Any] | None) -> tuple[str, ...]:
    kv, q = row.get("peak_kv_cache_usage"), row.get("queued")
    return (f"{row['concurrency']}{' *' if row.get('above_max_concurrency') else ''}",
            _f(row["ttft_ms"]["mean"], ".0f"), _f(row["ttft_ms"]["p50"], ".0f"), _f(row["ttft_ms"]["p99"], ".0f"),
            "burst" if row.get("burst") else
            _f(row.get("per_request_tokens_per_s"), ".1f") + ("!" if row.get("above_decode_ceiling") else ""),
            _f(row.get("output_tokens_per_s"), ".1f"), _f(row.get("requests_per_s"), ".2f"),
            str(row.get("failed", 0)), kv_percent(kv, "–"),
            "–" if q is None else ("yes" if q else "no"),
            _f((prev or {}).get("output_tokens_per_s"), ".1f"),
            _f(((prev or {}).get("ttft_ms") or {}).get("mean"), ".0f"),
            _e(row.get("joules_per_output_token"), ".3f"), _e(row.get("output_tokens_per_s_per_w"), ".3f"))


class SweepScreen(Dialog[None]):
    CSS_PATH = "sweep.tcss"
    BINDINGS = [Binding("r", "rerun", "Run again", id="rerun"),
                Binding("escape", "close", "Stop and close", id="close")]
    KEYS = "r: run again   esc: stop and close"

    def __init__(self, status: Mapping[str, Any] | None = None, plan: dict[str, Any] | None = None,
                 config: Any = None, transport: Any = None, save_dir: Any = None) -> None:
        super().__init__()
        from backend.bench.sweep import (
            SweepConfig,  # start-up: loaded on first use, not before the console's first frame
        )

        self.status, self.plan = status, plan
        self.config = config or SweepConfig(list(DEFAULT_LEVELS))
        self.transport, self.save_dir = transport, save_dir  # tests: a fake server, a folder
        self.energy = False  # set on mount: whether NVML lists GPUs whose power a level can sample
        self.running = False
        self.rows: list[dict[str, Any]] = []
        self.result: dict[str, Any] | None = None
        self.previous: dict[str, Any] | None = None
        self.progress: dict[int, str] = {}

    def compose_body(self) -> ComposeResult:
        yield Label("", id="config")
        yield Static("", id="levels")
        yield DataTable(id="table", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="plots"):
            yield PlotextPlot(id="tps")
            yield PlotextPlot(id="ttft")
        yield Static("", id="legend")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "concurrency sweep"
        gpus = self.app.gpus
        self.energy = bool(gpus is not None and getattr(gpus, "gpus", ()))  # NVML opened, GPUs listed
        self.query_one(DataTable).add_columns(*shown(COLUMNS, False, self.energy))
        self.start()

    def on_resize(self) -> None:
        self.set_class(self.size.height < SHORT_H, "-short")
        self._show_levels()

    # -- the run ---------------------------------------------------------------------------------
    def start(self) -> None:
        c = self.config
        self.query_one("#config", Label).update(
            f"sweep {','.join(map(str, c.levels))}: ~{c.input_tokens} prompt tokens, {c.output_tokens} output "
            f"tokens, {c.requests_per_level or 'max(4, 2 x level)'} requests per level")
        self.rows, self.result, self.running = [], None, True
        self.progress = {lv: "waiting" for lv in c.levels}
        self.query_one(DataTable).clear()
        self._show_levels()
        self._plot()
        self.run_sweep()

    @work(group="sweep", exclusive=True, exit_on_error=False)
    async def run_sweep(self) -> None:
        from backend.bench import sweep  # start-up: loaded on first use, not before the console's first frame
        from backend.bench.loadtest import BenchInputError

        def on_event(ev: Any) -> None:
            self.post_message(SweepEvent(ev))

        try:
            previous = await asyncio.to_thread(sweep.previous, None, self.save_dir)
            result = await sweep.run_sweep(self.app.settings, self.config, on_event,
                                           status=self.status, plan=self.plan, transport=self.transport,
                                           gpus=self.app.gpus)
            if any(r["completed"] for r in result["levels"]):
                jpath, cpath = await asyncio.to_thread(sweep.save, result, self.save_dir)
                result["saved"] = {"json": str(jpath), "csv": str(cpath)}
            self.post_message(SweepFinished(result, previous))
        except BenchInputError as e:
            self.post_message(SweepFinished(None, error=str(e)))
        except Exception as e:  # never a traceback on screen
            self.post_message(SweepFinished(None, error=f"{type(e).__name__}: {e}"))

    @on(SweepEvent)
    def sweep_moved(self, message: SweepEvent) -> None:
        from backend.bench.sweep import (
            LevelProgress,  # start-up: loaded on first use, not before the console's first frame
        )

        ev = message.event
        if isinstance(ev, LevelProgress):
            self.progress[ev.concurrency] = (f"level {ev.index + 1}/{ev.levels}: {ev.done}/{ev.total} done, "
                                             f"{ev.in_flight} in flight")
        elif isinstance(ev, dict):
            self.rows.append(ev)
            self.progress[ev["concurrency"]] = (f"done: {ev['completed']}/{ev['requests']} in "
                                                f"{_f(ev.get('wall_s'), '.1f')} s"
                                                + (f", {ev['failed']} failed" if ev.get("failed") else ""))
            self.query_one(DataTable).add_row(*shown(table_row(ev, None), False, self.energy))
            self._plot()
        self._show_levels()

    @on(SweepFinished)
    def finished(self, message: SweepFinished) -> None:
        self.running = False
        levels = self.query_one("#levels", Static)
        if message.error:
            levels.update(Text(message.error, style(self.app, "error")))
            return
        self.result, self.previous = message.result, message.previous
        table = self.query_one(DataTable)  # again, now with the previous sweep beside
        table.clear(columns=bool(self.previous))
        if self.previous:
            table.add_columns(*shown(COLUMNS, True, self.energy))
        for row in self.rows:
            cells = table_row(row, self._prev_row(row["concurrency"]))
            table.add_row(*shown(cells, bool(self.previous), self.energy))
        self._show_levels()
        self._plot()

    def _prev_row(self, level: int) -> dict[str, Any] | None:
        levels: list[dict[str, Any]] = (self.previous or {}).get("levels") or []
        for r in levels:
            if r.get("concurrency") == level:
                return r
        return None

    # -- drawing ---------------------------------------------------------------------------------
    def _show_levels(self) -> None:
        text = Text()
        short = self.has_class("-short")
        for lv in self.config.levels:
            state = self.progress.get(lv, "")
            mark = "✓" if state.startswith("done") else ("▶" if state.startswith("level") else "·")
            if short and mark != "▶":
                continue  # a short screen: the level running only (the table has the finished ones)
            text.append(f"{mark} concurrency {lv:>4}: {state}\n", "" if mark != "·" else "dim")
        res = self.result or {}
        if res.get("error"):
            text.append(f"{res['error']}\n  fix: {res.get('fix') or 'see the server log'}\n", style(self.app, "error"))
        if res.get("saved"):
            text.append(f"saved: {res['saved']['json']} (and .csv)", "dim")
        if self.previous:
            text.append(f"\nbeside: the previous sweep, {self.previous.get('path')}", "dim")
        self.query_one("#levels", Static).update(text)
        pred = (self.result or {}).get("predicted") or self._predicted()
        mc, ceiling = pred.get("max_concurrency"), pred.get("decode_ceiling_tokens_per_s")
        self.query_one("#legend", Static).update(Text(
            (f"* above the ledger's max concurrency {mc:g}x (full-length sequences)" if mc is not None
             else "no max concurrency known") + " · "
            + (f"batch-1 decode ceiling {ceiling:.0f} tok/s (! above it)" if ceiling
               else "batch-1 decode ceiling n/a (CPU or unknown card)")
            + ("" if self.energy else " · energy unknown (no GPU power from NVML)"), "dim"))

    def _predicted(self) -> dict[str, Any]:
        from backend.bench.loadtest import (
            predict,  # start-up: loaded on first use, not before the console's first frame
        )

        return predict(self.app.settings, self.status, self.plan)

    def _plot(self) -> None:
        pred = (self.result or {}).get("predicted") or self._predicted()
        mc, ceiling = pred.get("max_concurrency"), pred.get("decode_ceiling_tokens_per_s")
        top = max(self.config.levels)
        # short titles: at 80×24 each plot is ~35 columns, and plotext drops a title wider than that
        series: tuple[tuple[str, str, Callable[[dict[str, Any]], Any]], ...] = (
            ("#tps", "total tok/s", lambda r: r.get("output_tokens_per_s")),
            ("#ttft", "mean TTFT ms", lambda r: (r.get("ttft_ms") or {}).get("mean")))
        for wid, title, get in series:
            widget = self.query_one(wid, PlotextPlot)
            plt = widget.plt
            plt.clear_data()
            plt.clear_figure()
            plt.title(title + " vs conc.")
            plt.xticks(list(self.config.levels))  # the levels swept, not plotext's 0.0 1.3 2.6 …
            points = [(r["concurrency"], get(r)) for r in self.rows if get(r) is not None]
            before = [(r["concurrency"], get(r)) for r in (self.previous or {}).get("levels") or []
                      if get(r) is not None]
            if before:
                plt.plot([x for x, _ in before], [y for _, y in before], marker="dot", label="previous")
            if points:
                plt.plot([x for x, _ in points], [y for _, y in points], marker="braille", label="this sweep")
            if mc is not None and mc <= 2 * top:
                plt.vline(mc, theme_rgb(self.app, "error"))  # the ledger's max concurrency
            if wid == "#tps" and ceiling:
                plt.hline(ceiling, theme_rgb(self.app, "warning"))  # the batch-1 decode ceiling
            per_w = [(r["concurrency"], r["output_tokens_per_s_per_w"]) for r in self.rows
                     if wid == "#tps" and r.get("output_tokens_per_s_per_w") is not None]
            if per_w:  # energy: tok/s per W on the right axis (GPU power from NVML)
                plt.plot([x for x, _ in per_w], [y for _, y in per_w], marker="dot", yside="right",
                         label="tok/s per W (right)")
            plt.xlim(0, top * 1.05 + 1)
            widget.refresh()

    # -- keys ------------------------------------------------------------------------------------
    def action_rerun(self) -> None:
        if not self.running:
            self.start()

    def action_close(self) -> None:
        self.workers.cancel_group(self, "sweep")  # closes the streams: the server aborts them
        self.dismiss(None)
