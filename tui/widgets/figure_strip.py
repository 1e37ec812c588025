"""FigureStrip: the side column in one line, for terminals too narrow for it (below ~100 columns):
server state, KV tokens, max concurrency, GPU memory. `i` opens the full column as an overlay."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static


def strip_text(state: str, parsed: dict[str, Any], gpu: tuple[float, float] | None) -> str:
    kv = parsed.get("kv_cache_tokens")
    conc = parsed.get("max_concurrency")
    parts = [state.upper(),
             f"KV {kv:,} tok" if kv is not None else "KV —",
             f"conc {conc:.2f}x" if conc is not None else "conc —",
             f"GPU {gpu[0]:.1f}/{gpu[1]:.1f} GiB" if gpu else "GPU n/a"]
    return " · ".join(parts)


class FigureStrip(Static):
    DEFAULT_CSS = """
    FigureStrip { height: 1; padding: 0 1; background: $boost; display: none; }
    """

    last_text = ""

    def show(self, state: str, parsed: dict[str, Any], gpu: tuple[float, float] | None) -> None:
        """Only when the text changes: an update lays out the whole screen (each poll, 5 a second,
        hidden or not: the log's scrollbars redrew each time, ~6 % of a core for an idle console)."""
        shown = strip_text(state, parsed, gpu) + "  (i: panels)"
        if shown == self.last_text:
            return
        self.last_text = shown
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(strip_text(state, parsed, gpu))
        text.append("  (i: panels)", "dim")
        self.update(text)
