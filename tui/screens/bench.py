"""BenchScreen: `qwen-tui bench` from the console (key b). A load test against the running server,
live progress, then the measured figures beside the ledger's prediction. `+`/`-` double or halve
the requests in flight, `r` runs again, `esc` stops the run and closes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Label, ProgressBar, Static

from tui.messages import BenchFinished, BenchProgress
from tui.palette import style
from tui.screens.dialog import Dialog

if TYPE_CHECKING:
    from backend.bench.loadtest import Progress


class BenchScreen(Dialog[None]):
    CSS_PATH = "bench.tcss"
    BINDINGS = [Binding("r", "rerun", "Run again", id="rerun"),
                Binding("plus", "more", "Double concurrency", id="more"),
                Binding("minus", "fewer", "Halve concurrency", id="fewer"),
                Binding("w", "sweep", "Concurrency sweep", id="sweep"),
                Binding("escape", "close", "Stop and close", id="close")]
    KEYS = "r: run again   +/-: double/halve concurrency   w: sweep 1,4,8,16,32   esc: stop and close"

    def __init__(self, status: Mapping[str, Any] | None = None, plan: dict[str, Any] | None = None,
                 config: Any = None) -> None:
        super().__init__()
        from backend.bench.loadtest import (
            BenchConfig,  # start-up: loaded on first use, not before the console's first frame
        )

        self.status, self.plan = status, plan
        self.config = config or BenchConfig()
        self.running = False
        self.report: dict[str, Any] | None = None

    def compose_body(self) -> ComposeResult:
        yield Label("", id="config")
        yield ProgressBar(id="progress", show_eta=False)
        with VerticalScroll(id="results-box"):  # scrolls at 80×24: the keys line stays on screen
            yield Static("", id="results")

    def on_mount(self) -> None:
        self.start()

    def on_resize(self) -> None:
        self.set_class(self.size.height < 36, "-short")

    def start(self) -> None:
        c = self.config
        self.query_one("#config", Label).update(
            f"{c.requests} streaming requests, {c.concurrency} in flight, ~{c.prompt_tokens} prompt tokens, "
            f"{c.max_tokens} output tokens each")
        self.query_one(ProgressBar).update(total=c.requests, progress=0)
        self.query_one("#results", Static).update(Text("warming up…", "dim"))
        self.running = True
        self.run_load()

    @work(group="bench", exclusive=True, exit_on_error=False)
    async def run_load(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.bench.loadtest import BenchInputError, run_bench

        def progress(p: Progress) -> None:
            self.post_message(BenchProgress(p.done, p.in_flight, p.total))

        try:
            report = await run_bench(self.app.settings, self.config, progress, status=self.status, plan=self.plan,
                                     gpus=self.app.gpus)
            self.post_message(BenchFinished(report))
        except BenchInputError as e:
            self.post_message(BenchFinished(None, error=str(e)))
        except Exception as e:  # never a traceback on screen
            self.post_message(BenchFinished(None, error=f"{type(e).__name__}: {e}"))

    @on(BenchProgress)
    def progress(self, message: BenchProgress) -> None:
        self.query_one(ProgressBar).update(total=message.total, progress=message.done)
        self.query_one("#results", Static).update(Text(f"{message.done}/{message.total} done, "
                                                       f"{message.in_flight} in flight", "dim"))

    @on(BenchFinished)
    def finished(self, message: BenchFinished) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.bench.summary import summary_lines

        self.running = False
        self.report = message.report
        results = self.query_one("#results", Static)
        rep = message.report
        if message.error or rep is None:
            results.update(Text(message.error or "the load test gave no report", style(self.app, "error")))
            return
        if rep.get("error"):
            fix = rep.get("fix") or "see the server log"
            results.update(Text(f"{rep['error']}\n  fix: {fix}", style(self.app, "error")))
            return
        results.update(Text("\n".join(summary_lines(rep)[1:])))

    def action_rerun(self) -> None:
        if not self.running:
            self.start()

    def _scale(self, factor: float) -> None:
        if self.running:
            self.app.notify("a run is going: wait, or esc", severity="warning")
            return
        self.config.concurrency = max(1, min(256, int(self.config.concurrency * factor)))
        self.config.requests = max(self.config.requests, self.config.concurrency * 2)
        self.start()

    def action_more(self) -> None:
        self._scale(2)

    def action_fewer(self) -> None:
        self._scale(0.5)

    def action_sweep(self) -> None:
        """The concurrency sweep in its own dialog, in place of this one (a run going is stopped)."""
        from tui.screens.sweep import SweepScreen  # start-up: loaded on first use, not before the console's first frame

        self.workers.cancel_group(self, "bench")
        status, plan, app = self.status, self.plan, self.app
        self.dismiss(None)
        app.push_screen(SweepScreen(status, plan))

    def action_close(self) -> None:
        self.workers.cancel_group(self, "bench")  # closes the streams: the server aborts them
        self.dismiss(None)
