"""DoctorScreen: `qwen-tui doctor` in the console (key d): every pre-flight check, its figures and
its fix, worst first. `r` runs them again, `esc` closes."""

from __future__ import annotations

import asyncio

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from tui.messages import DoctorReady
from tui.palette import style
from tui.worker_errors import WorkerErrorsToApp

STYLE = {"ok": ("success", ""), "warn": ("warning", ""), "fail": ("error", "bold"), "skip": ("", "dim")}
RANK = {"fail": 0, "warn": 1, "ok": 2, "skip": 3}


def column_widths(screen_width: int) -> tuple[int, int, int, int]:
    """Status, check, found, fix: what fits in the dialog (95 % of the screen, its frame, a cell
    padding of 1 on each side and the scrollbar); found and fix wrap, so nothing is cut."""
    avail = int(screen_width * 0.95) - 6 - 8 - 2
    rest = max(avail - 4 - 14, 30)
    found = rest * 11 // 20
    return 4, 14, found, rest - found


class DoctorScreen(WorkerErrorsToApp, ModalScreen[None]):
    CSS_PATH = "doctor.tcss"
    BINDINGS = [Binding("r", "rerun", "Run again", id="rerun"),
                Binding("g", "pull", "Get the model (pull)", id="pull"),
                Binding("escape", "dismiss", "Close", id="close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("running the checks…", id="summary")
            yield DataTable(id="checks", cursor_type="row", zebra_stripes=True)
            yield Label("r: run again   esc: close", id="keys")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, width in zip(("", "check", "found", "fix"), column_widths(self.app.size.width), strict=False):
            table.add_column(label, width=width)
        self.run_doctor()

    @work(group="doctor", exclusive=True, exit_on_error=False)
    async def run_doctor(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.doctor import Env, run_checks

        try:
            checks = await asyncio.to_thread(run_checks, self.app.settings, Env(monitor=self.app.gpus))
            self.post_message(DoctorReady(checks))
        except Exception as e:  # run_checks never raises by contract; be sure anyway
            self.post_message(DoctorReady([], error=f"{type(e).__name__}: {e}"))

    @on(DoctorReady)
    def show(self, message: DoctorReady) -> None:
        table = self.query_one(DataTable)
        table.clear()
        summary = self.query_one("#summary", Label)
        if message.error:
            summary.update(Text(f"the checks could not run: {message.error}", style(self.app, "error")))
            return
        counts = {s: sum(c.status == s for c in message.checks) for s in RANK}
        summary.update(Text(f"{counts['ok']} ok, {counts['warn']} warning(s), {counts['fail']} failed, "
                            f"{counts['skip']} skipped",
                            style(self.app, "error", "bold") if counts["fail"] else "bold"))
        offer = any(c.name == "model" and "qwen-tui pull" in (c.fix or "") for c in message.checks)
        self.query_one("#keys", Label).update("r: run again   " + ("g: get the model (pull)   " if offer else "")
                                              + "esc: close")
        for c in sorted(message.checks, key=lambda c: RANK.get(c.status, 9)):
            table.add_row(Text(c.status.upper(), style(self.app, *STYLE.get(c.status, ("", "")))), c.name,
                          Text(c.message, overflow="fold"), Text(c.fix or "", "italic", overflow="fold"),
                          key=c.name, height=None)

    def action_pull(self) -> None:
        """The model check says the repo id is not downloaded: the pull screen, for that repo id."""
        # start-up: loaded on first use, not before the console's first frame
        from tui.screens.pull import PullScreen, looks_like_repo_id

        model = str(self.app.settings.server.get("model") or "")
        main = self.app.main_screen
        self.app.push_screen(PullScreen(model if looks_like_repo_id(model) else None),
                             main._settings_closed if main is not None else None)

    def action_rerun(self) -> None:
        self.query_one("#summary", Label).update("running the checks…")
        self.run_doctor()
