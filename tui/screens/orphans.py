"""OrphanScreen: before a start, the processes that hold (or may hold) the GPUs without belonging
to a supervisor. Kill the highlighted pid (and only it), start anyway, or cancel."""

from __future__ import annotations

import asyncio
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from tui.messages import OrphanKilled

GIB = 2**30


def _gib(value: int | None) -> str:
    return f"{value / GIB:.1f} GiB" if value else "—"


class OrphanScreen(ModalScreen[str | None]):
    """Dismisses with "start" (nothing is left), "force" (start beside them) or None (cancel)."""

    CSS_PATH = "orphans.tcss"
    BINDINGS = [
        Binding("k", "kill", "Kill this pid", id="kill"),
        Binding("f", "force", "Start anyway", id="force"),
        Binding("escape", "cancel", "Cancel", id="cancel"),
    ]

    def __init__(self, scan: Any, client: Any, gpus: Any = None) -> None:
        super().__init__()
        self.scan, self.client, self.gpus = scan, client, gpus
        self.killing: int | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Processes no console owns are running and may hold GPU memory. "
                        "A start now may fail with out-of-memory.", id="question")
            yield DataTable(id="orphans", cursor_type="row", zebra_stripes=True)
            yield Static("", id="report")
            yield Label("k: kill the highlighted pid only   f: start anyway   esc: cancel", id="keys")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("pid", "role", "GPU memory", "RSS", "command")
        self._fill()
        table.focus()

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        for p in self.scan.processes:
            table.add_row(str(p.pid), p.role, _gib(p.gpu_bytes), _gib(p.rss_bytes), p.cmdline[:70] or p.name,
                          key=str(p.pid))
        note = f"NVML: {self.scan.nvml}" if self.scan.nvml else f"GPU memory held: {_gib(self.scan.gpu_bytes)}"
        self.query_one("#question", Label).tooltip = note

    def highlighted_pid(self) -> int | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        return int(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def action_kill(self) -> None:
        pid = self.highlighted_pid()
        if pid is None or self.killing is not None:
            return
        self.killing = pid
        self.query_one("#report", Static).update(f"stopping pid {pid}…")
        self.kill_worker(pid)

    @work(group="orphan-kill", exclusive=True, exit_on_error=False)
    async def kill_worker(self, pid: int) -> None:
        try:
            stopped = await asyncio.to_thread(self.client.kill_orphans, [pid], self.scan, self.gpus)
            scan = await asyncio.to_thread(self.client.scan_orphans, self._env(), self.gpus)
            self.post_message(OrphanKilled(pid, stopped, scan))
        except Exception as e:  # a refused pid (reused, gone) or a scan error: say it, keep the dialog
            self.post_message(OrphanKilled(pid, error=str(e)))

    def _env(self) -> dict:
        return self.app.settings.env

    @on(OrphanKilled)
    def killed(self, message: OrphanKilled) -> None:
        self.killing = None
        report = self.query_one("#report", Static)
        if message.error:
            report.update(f"pid {message.pid}: {message.error}")
            return
        report.update(f"pid {message.pid}: {message.stopped.summary()}")
        self.scan = message.scan
        if not self.scan.processes:
            self.app.notify(f"pid {message.pid}: {message.stopped.summary()}", timeout=8)
            self.dismiss("start")
            return
        self._fill()

    def action_force(self) -> None:
        self.dismiss("force")

    def action_cancel(self) -> None:
        self.dismiss(None)
