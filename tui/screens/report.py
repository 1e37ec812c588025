"""ReportScreen: `qwen-tui report` in the console (key t). The redacted triage report (backend/report.py), to
read, save to a file (`w`, into the state dir) or copy (`y`: OSC 52 through SSH, and the local clipboard when
there is one). `esc` closes."""

from __future__ import annotations

import asyncio
import time

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Label, TextArea

from tui import clipboard
from tui.messages import ReportReady
from tui.palette import style
from tui.screens.dialog import Dialog


class ReportScreen(Dialog[None]):
    CSS_PATH = "report.tcss"
    BINDINGS = [Binding("w", "save", "Save to a file", id="save"),
                Binding("y", "copy", "Copy", id="copy"),
                Binding("escape", "dismiss", "Close", id="close")]
    KEYS = "w: save to a file   y: copy   esc: close   (read it before you paste it)"

    def __init__(self) -> None:
        super().__init__()
        self.text: str | None = None

    def compose_body(self) -> ComposeResult:
        yield Label("building the report (doctor, plan, log)…", id="summary")
        yield TextArea("", read_only=True, soft_wrap=True, id="report")  # at 80 columns nothing is cut

    def on_mount(self) -> None:
        self.build_report()

    @work(group="report", exclusive=True, exit_on_error=False)
    async def build_report(self) -> None:
        from backend.report import build  # start-up: loaded on first use, not before the console's first frame

        try:
            text, _, red = await asyncio.to_thread(build, self.app.settings, True, self.app.gpus)
            self.post_message(ReportReady(text, red.summary() if red else "not redacted"))
        except Exception as e:  # the report never raises by design; say so if it does
            self.post_message(ReportReady(None, error=f"{type(e).__name__}: {e}"))

    @on(ReportReady)
    def show(self, message: ReportReady) -> None:
        summary = self.query_one("#summary", Label)
        if message.error or message.text is None:
            summary.update(Text(f"the report could not be built: {message.error}", style(self.app, "error", "bold")))
            return
        self.text = message.text
        self.query_one(TextArea).load_text(message.text)
        summary.update(Text(f"{len(message.text.splitlines())} lines; redacted: {message.redactions}", "bold"))

    def action_save(self) -> None:
        from backend import paths  # start-up: loaded on first use, not before the console's first frame

        if self.text is None:
            self.notify("the report is not ready yet", severity="warning")
            return
        path = paths.state_dir() / f"report-{time.strftime('%Y%m%d-%H%M%S')}.md"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.text + "\n", encoding="utf-8")
        except OSError as e:
            self.notify(f"cannot write {path}: {e.strerror}", severity="error")
            return
        self.notify(f"saved to {path}", timeout=10)

    def action_copy(self) -> None:
        if self.text is None:
            self.notify("the report is not ready yet", severity="warning")
            return
        how = clipboard.copy(self.app, self.text)
        self.notify(f"copied {len(self.text)} characters: {how}", timeout=8)
