"""OrphanScreen: before a start, the processes that hold (or may hold) the GPUs without belonging
to this console's supervisor, and the other live qwen-tui supervisors. Kill the highlighted pid (and
only it), start anyway, or cancel. A pid that another live supervisor runs is never killed (that
supervisor would only restart it): `k` offers to stop that supervisor instead, and a second `k`
does it. Another user's processes are listed, never offered."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Label, Static

from backend.timefmt import duration as ago
from tui.messages import OrphanKilled
from tui.screens.dialog import Dialog

if TYPE_CHECKING:
    from backend.server.orphans import OrphanScan
    from backend.server.owners import SupervisorInfo

GIB = 2**30


def _gib(value: int | None) -> str:
    return f"{value / GIB:.1f} GiB" if value else "—"


class OrphanScreen(Dialog[str | None]):
    """Dismisses with "start" (nothing is left), "force" (start beside them) or None (cancel)."""

    CSS_PATH = "orphans.tcss"
    BINDINGS = [
        Binding("k", "kill", "Kill this pid", id="kill"),
        Binding("f", "force", "Start anyway", id="force"),
        Binding("escape", "cancel", "Cancel", id="cancel"),
    ]

    def __init__(self, scan: OrphanScan, client: Any, gpus: Any = None) -> None:
        super().__init__()
        self.scan, self.client, self.gpus = scan, client, gpus
        self.killing: int | None = None
        self.confirm_supervisor: int | None = None  # a first k on a supervised row asks; a second stops it

    KEYS = "k: kill the highlighted pid only (or stop the supervisor that runs it)   f: start anyway   esc: cancel"

    def heading(self) -> str:
        return self._headline()

    def compose_body(self) -> ComposeResult:
        yield DataTable(id="orphans", cursor_type="row", zebra_stripes=True)
        yield Static("", id="report")

    def _headline(self) -> str:
        n = len(self.scan.orphans)
        text = (f"{n} orphan{'s' if n != 1 else ''}: vLLM processes no live qwen-tui supervisor runs. "
                "They may hold memory: a start now may fail with out-of-memory.")
        servers = getattr(self.scan, "servers", [])
        if servers:
            text += (f" Also running, not orphans: {len(servers)} teammate server{'s' if len(servers) != 1 else ''}"
                     " (never killed from here).")
        return text

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("pid", "role", "GPU memory", "RSS", "command")
        self._fill()
        table.focus()

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        for p in self.scan.orphans:
            role = f"{p.role} (other user)" if self.scan.refusal(p.pid) else p.role
            table.add_row(str(p.pid), role, _gib(p.gpu_bytes), _gib(p.rss_bytes), p.cmdline[:70] or p.name,
                          key=str(p.pid))
        servers = getattr(self.scan, "servers", None) or []
        shown = {t.sup.pid for t in servers}
        for t in servers:  # one row per teammate's server, by user and port: its supervisor's pid
            table.add_row(str(t.sup.pid), f"{t.user}'s server", _gib(t.gpu_total or None), _gib(t.rss_bytes),
                          f"port {t.port or '?'} · {t.sup.state or '?'} · up {ago(t.uptime_s)} · "
                          f"{t.sup.state_dir or 'state dir not visible'}", key=str(t.sup.pid))
        for s in getattr(self.scan, "supervisors", []):
            if s.pid not in shown:
                table.add_row(str(s.pid), "supervisor", "—", "—",
                              f"{s.user} · {s.state_dir or 'state dir not visible'}"
                              + (f" · port {s.port}" if s.port else "") + (f" · {s.state}" if s.state else ""),
                              key=str(s.pid))
        note = f"NVML: {self.scan.nvml}" if self.scan.nvml else f"GPU memory held: {_gib(self.scan.gpu_bytes)}"
        self.query_one("#question", Label).update(self._headline())
        self.query_one("#question", Label).tooltip = note

    def _supervisor_for(self, pid: int) -> SupervisorInfo | None:
        """The live supervisor a row belongs to (the row itself, or the one that runs its pid)."""
        sups = getattr(self.scan, "supervisors", [])
        return next((s for s in sups if s.pid == pid), None) or self.scan.owner(pid)

    def highlighted_pid(self) -> int | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return int(key) if key is not None else None

    def action_kill(self) -> None:
        pid = self.highlighted_pid()
        if pid is None or self.killing is not None:
            return
        report = self.query_one("#report", Static)
        sup = self._supervisor_for(pid)
        if sup is not None:
            if not sup.ours:
                report.update(f"pid {pid} is run by {sup.describe()}: another user's, not stopped from here")
                return
            if self.confirm_supervisor != sup.pid:
                self.confirm_supervisor = sup.pid
                what = "" if pid == sup.pid else f"pid {pid} is run by it: killing it would only restart it. "
                report.update(f"{what}Press k again to stop {sup.describe()} (its server goes down)")
                return
            self.confirm_supervisor = None
            self.killing = sup.pid
            report.update(f"stopping supervisor pid {sup.pid}…")
            self.stop_supervisor_worker(sup)
            return
        self.confirm_supervisor = None
        refusal = self.scan.refusal(pid)
        if refusal:
            report.update(refusal)
            return
        self.killing = pid
        report.update(f"stopping pid {pid}…")
        self.kill_worker(pid)

    @work(group="orphan-kill", exclusive=True, exit_on_error=False)
    async def stop_supervisor_worker(self, sup: SupervisorInfo) -> None:
        try:
            done = await asyncio.to_thread(self.client.stop_supervisor, sup)
            scan = await asyncio.to_thread(self.client.scan_orphans, self._env(), self.gpus)
            self.post_message(OrphanKilled(sup.pid, done, scan))
        except Exception as e:  # a refused pid (reused, gone) or a scan error: say it, keep the dialog
            self.post_message(OrphanKilled(sup.pid, error=str(e)))

    @work(group="orphan-kill", exclusive=True, exit_on_error=False)
    async def kill_worker(self, pid: int) -> None:
        try:
            stopped = await asyncio.to_thread(self.client.kill_orphans, [pid], self.scan, self.gpus)
            scan = await asyncio.to_thread(self.client.scan_orphans, self._env(), self.gpus)
            self.post_message(OrphanKilled(pid, stopped, scan))
        except Exception as e:  # a refused pid (reused, gone) or a scan error: say it, keep the dialog
            self.post_message(OrphanKilled(pid, error=str(e)))

    def _env(self) -> dict[str, str]:
        return self.app.settings.env

    @on(OrphanKilled)
    def killed(self, message: OrphanKilled) -> None:
        self.killing = None
        report = self.query_one("#report", Static)
        if message.error or message.stopped is None or message.scan is None:
            report.update(f"pid {message.pid}: {message.error or 'no answer from the kill'}")
            return
        summary = message.stopped if isinstance(message.stopped, str) else message.stopped.summary()
        report.update(f"pid {message.pid}: {summary}")
        self.scan = message.scan
        if not self.scan.orphans:
            self.app.notify(f"pid {message.pid}: {summary}", timeout=8)
            self.dismiss("start")
            return
        self._fill()

    def action_force(self) -> None:
        self.dismiss("force")

    def action_cancel(self) -> None:
        self.dismiss(None)
