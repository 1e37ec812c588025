"""GpuPanel: one card's memory, utilization, temperature, power and PCIe link, from NVML samples."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tui.palette import style

if TYPE_CHECKING:
    from textual.app import App

    from backend.gpu_facts import GpuSample
    from backend.server.orphans import Holder


def _na(v: Any, fmt: str = "", unit: str = "") -> str:
    return "N/A" if v is None else f"{format(v, fmt)}{unit}"


def bar(fraction: float | None, width: int = 12, app: App[Any] | None = None) -> Text:
    if fraction is None:
        return Text("N/A", "dim")
    n = max(0, min(width, round(fraction * width)))
    level = "success" if fraction < 0.7 else "warning" if fraction < 0.9 else "error"
    return Text("█" * n, style(app, level)) + Text("░" * (width - n), "dim")


def rows(s: GpuSample, app: App[Any] | None = None) -> list[tuple[str, Text | str]]:
    gib = 2**30
    mem = (f"{s.memory_used_bytes / gib:.1f} / {s.memory_total_bytes / gib:.1f} GiB"
           if s.memory_used_bytes is not None and s.memory_total_bytes else "N/A")
    util = s.utilization_gpu_pct / 100 if s.utilization_gpu_pct is not None else None
    link = "N/A"
    if s.pcie_gen is not None:
        link = f"Gen{s.pcie_gen}/{_na(s.pcie_gen_max)} x{_na(s.pcie_width)}/{_na(s.pcie_width_max)}"
    power = _na(s.power_w, ".0f", " W") + (f" / {s.power_limit_w:.0f} W" if s.power_limit_w else "")
    return [
        ("memory", bar(s.memory_used_fraction, app=app) + Text(f" {mem}")),
        ("util", bar(util, app=app) + Text(f" {_na(s.utilization_gpu_pct, '', '%')}")),
        ("temp", _na(s.temperature_c, "", " °C")),
        ("power", power),
        ("PCIe", link),
    ]


def holder_rows(holders: list[Holder], most: int = 4, app: App[Any] | None = None) -> list[tuple[str, Text | str]]:
    """One row per process on the card; not the supervised server's is flagged (an orphan holds
    memory a restart will need)."""
    out: list[tuple[str, Text | str]] = []
    for h in holders[:most]:
        mem = f"{h.gpu_bytes / 2**30:.1f} GiB" if h.gpu_bytes else "? GiB"
        text = Text(f"{h.pid} {h.label[:22]} {mem}")
        if not h.owned:
            text.append("  not ours", style(app, "warning", "bold"))
        out.append(("proc", text))
    if len(holders) > most:
        out.append(("", Text(f"+{len(holders) - most} more", "dim")))
    return out


class GpuPanel(Static):
    DEFAULT_CSS = """
    GpuPanel { height: auto; }
    """

    last_rows: list[tuple[str, str]] = []  # what is shown, as plain text

    def show(self, sample: GpuSample, holders: list[Holder] | None = None) -> None:
        self.border_title = f"GPU {sample.index} · {sample.name}"
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        shown = rows(sample, self.app)
        shown += holder_rows(holders or [], app=self.app)
        self.last_rows = [(name, str(value)) for name, value in shown]
        for name, value in shown:
            table.add_row(name, value)
        self.update(table)
