"""HostPanel: the host's CPU load, RAM, swap and the RSS of the supervisor and each vLLM process, with a
warning when a level-1 sleep (the weights copied into host RAM) would not fit in what is available."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tui.palette import style
from tui.widgets.gpu_panel import bar

if TYPE_CHECKING:
    from textual.app import App

    from backend.host import HostSample

GIB = 2**30
ROLES = {"supervisor": "supervisor", "api_server": "API server", "engine_core": "engine core",
         "worker": "worker", "vllm": "vLLM", "other": "process"}


def _g(b: int | None) -> str:
    if b is None:
        return "?"
    return f"{b / GIB:.1f} GiB" if b >= GIB else f"{b / 2**20:.0f} MiB"


def rows(s: HostSample, most: int = 4, app: App[Any] | None = None) -> list[tuple[str, Text | str]]:
    load = "N/A" if s.load_1m is None else f"{s.load_1m:.2f}"
    cpu = "" if s.cpu_percent is None else f", {s.cpu_percent:.0f} % busy"
    ram_frac = s.ram_used_bytes / s.ram_total_bytes if s.ram_total_bytes else None
    out: list[tuple[str, Text | str]] = [
        ("CPU", f"load {load} / {s.cpu_count} cores{cpu}"),
        ("RAM", bar(ram_frac, width=8, app=app) + Text(f" {_g(s.ram_used_bytes)} used, {_g(s.ram_available_bytes)} "
                                                         f"free of {_g(s.ram_total_bytes)}")),
        ("swap", "none" if not s.swap_total_bytes else f"{_g(s.swap_used_bytes)} of {_g(s.swap_total_bytes)}"),
    ]
    for p in s.procs[:most]:
        out.append(("RSS", f"{ROLES.get(p.role, p.role)} {p.pid}: {_g(p.rss_bytes)}"))
    extra = len(s.procs) - most + s.procs_left_out
    if extra > 0:
        out.append(("", Text(f"+{extra} more ({_g(s.server_rss_bytes)} for the server)", "dim")))
    return out


class HostPanel(Static):
    DEFAULT_CSS = """
    HostPanel { height: auto; }
    """

    last_rows: list[tuple[str, str]] = []  # what is shown, as plain text
    warning: str | None = None
    _shown: tuple[object, ...] | None = None

    def on_mount(self) -> None:
        self.border_title = "host"
        self.update(Text("sampling…", "dim"))

    def show(self, sample: HostSample, warning: str | None = None) -> None:
        shown = rows(sample, app=self.app)
        key = (tuple((n, str(v)) for n, v in shown), warning)
        if key == self._shown:  # an idle box reads the same: no redraw
            return
        self._shown = key
        self.last_rows, self.warning = list(key[0]), warning
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for name, value in shown:
            table.add_row(name, value)
        if warning:
            table.add_row("sleep", Text(warning, style(self.app, "warning")))
        self.update(table)
