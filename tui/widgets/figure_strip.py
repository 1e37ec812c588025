"""FigureStrip: the side column in one line, for terminals too narrow for it (below ~100 columns):
server state, KV tokens, max concurrency, GPU memory. `i` opens the full column as an overlay."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static


def workers_text(workers: Any) -> str:
    """The server's workers by rank: "TP0 7449 · TP1 7450" (pid); "worker 7624" where vLLM's title names no
    rank (at TP=1 it never does; at TP=2 not in the first moments)."""
    return " · ".join(f"{'worker' if w.get('rank') is None else 'TP%s' % w['rank']} {w.get('pid')}"
                      for w in workers or [])


def strip_text(state: str, parsed: dict[str, Any], gpu: tuple[float, float] | None, workers: Any = None) -> str:
    kv = parsed.get("kv_cache_tokens")
    conc = parsed.get("max_concurrency")
    # without GPUs (the CPU build) the workers take the GPU's place: at TP=2 both ranks are on screen
    last = (f"GPU {gpu[0]:.1f}/{gpu[1]:.1f} GiB" if gpu else
            workers_text(workers) if workers else "GPU n/a")
    parts = [state.upper(),
             f"KV {kv:,} tok" if kv is not None else "KV —",
             f"conc {conc:.2f}x" if conc is not None else "conc —",
             last]
    return " · ".join(parts)


class FigureStrip(Static):
    DEFAULT_CSS = """
    FigureStrip { height: 1; padding: 0 1; background: $boost; display: none; }
    """

    last_text = ""

    def show(self, state: str, parsed: dict[str, Any], gpu: tuple[float, float] | None,
             workers: Any = None) -> None:
        """Only when the text changes: an update lays out the whole screen (each poll, 5 a second,
        hidden or not: the log's scrollbars redrew each time, ~6 % of a core for an idle console)."""
        shown = strip_text(state, parsed, gpu, workers) + "  (i: panels)"
        if shown == self.last_text:
            return
        self.last_text = shown
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(strip_text(state, parsed, gpu, workers))
        text.append("  (i: panels)", "dim")
        self.update(text)
