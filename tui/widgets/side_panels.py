"""SidePanels: the side column (startup figures, /metrics, the ledger, GPUs). Below 100 columns `i`
opens it over the log, taller than the screen at 80×24: focused there, its keys (↑↓ pgup pgdn)
scroll it at once, and the keys line says so."""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import VerticalScroll


class SidePanels(VerticalScroll):
    BINDINGS = [Binding("down", "scroll_down", "Scroll", key_display="↑↓", show=True),
                Binding("i", "screen.toggle_side", "Close panels", show=True)]
