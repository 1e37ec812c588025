"""MetricsPanel: what the server is doing now, from its /metrics (running and waiting requests,
KV cache in use, tokens/s, mean TTFT, preemptions)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tui.palette import style


def _n(v: Any, fmt: str = ",.0f", unit: str = "") -> str:
    return "—" if v is None else format(v, fmt) + unit


def rows(snap: dict[str, Any], rate: dict[str, Any]) -> list[tuple[str, str]]:
    kv = snap.get("kv_cache_usage")
    ttft = rate.get("ttft_mean_s")
    hit = rate.get("prefix_hit_rate")
    return [
        ("requests", f"{_n(snap.get('running'))} running, {_n(snap.get('waiting'))} waiting"),
        ("KV cache used", "—" if kv is None else f"{kv * 100:.1f} %"),
        ("generate", _n(rate.get("generation_tokens_per_s"), ",.1f", " tok/s")),
        ("prefill", _n(rate.get("prompt_tokens_per_s"), ",.1f", " tok/s")),
        ("TTFT (interval mean)", "—" if ttft is None else f"{ttft * 1000:.0f} ms"),
        ("prefix cache hits", "—" if hit is None else f"{hit * 100:.0f} %"),
        ("preemptions", _n(snap.get("preemptions"))),
        ("finished", _n(snap.get("requests_finished"))),
    ]


class MetricsPanel(Static):
    DEFAULT_CSS = """
    MetricsPanel { height: auto; }
    """

    last_rows: list[tuple[str, str]] = []  # what is shown, for tests and copy

    def on_mount(self) -> None:
        self.border_title = "live: /metrics"
        self.update(Text("shown once the server is READY", "dim"))

    _shown: tuple[object, ...] | None = None

    def show(self, snap: dict[str, Any] | None, rate: dict[str, Any], error: str | None = None) -> None:
        shown = (None if snap is None else tuple(rows(snap, rate)), error,
                 None if snap is None else ((snap.get("kv_cache_usage") or 0) > 0.9 or (snap.get("waiting") or 0) > 0))
        if shown == self._shown:  # an idle server reads the same every second: no redraw
            return
        self._shown = shown
        if snap is None:
            self.last_rows = []
            self.update(Text(error or "shown once the server is READY", style(self.app, "warning") if error else "dim"))
            return
        self.last_rows = rows(snap, rate)
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", overflow="fold")
        table.add_column(overflow="fold")
        for name, value in self.last_rows:
            table.add_row(name, value)
        if (snap.get("kv_cache_usage") or 0) > 0.9 or (snap.get("waiting") or 0) > 0:
            table.add_row("", Text("queueing: the KV cache is the limit (see the ledger's concurrency)",
                                   style(self.app, "warning")))
        self.update(table)
