"""FiguresPanel: what the startup log says — version, weights, KV cache, concurrency, graphs."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from textual.widgets import Static


def _num(v: Any, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def seconds_text(v: float) -> str:
    """Seconds with the digits that say something: 0.02 s is not "0.0 s"."""
    if v >= 0.095:
        return f"{v:.1f} s"
    return f"{v:.2f} s" if v >= 0.005 else "<0.01 s"


def _unit(v: Any, fmt: str, unit: str) -> str:
    """A figure with its unit, or "—" alone when unknown (never "— GiB")."""
    return "—" if v is None else f"{format(v, fmt)} {unit}"


def rows(parsed: dict[str, Any]) -> list[tuple[str, str]]:
    p = parsed
    gib, secs = p.get("weights_gib"), p.get("weights_seconds")
    if gib is not None and secs is not None:
        weights = f"{gib:.2f} GiB in {seconds_text(secs)}"
    elif gib is not None:
        weights = f"{gib:.2f} GiB (load time unknown)"
    elif secs is not None:
        weights = f"size unknown, {seconds_text(secs)}"
    else:
        weights = "—"
    conc = "—"
    if p.get("max_concurrency") is not None:
        at = p.get("max_concurrency_tokens")
        conc = f"{p['max_concurrency']:.2f}x" + (f" @ {at:,} tok" if at is not None else "")
    graphs = p.get("cuda_graph_seconds")
    init = p.get("init_engine_seconds")
    return [
        ("vLLM", p.get("vllm_version") or "—"),
        ("phase", p.get("phase") or "—"),
        ("weights", weights),
        ("KV cache", _unit(p.get("kv_cache_gib"), ".2f", "GiB")),
        ("KV tokens", _num(p.get("kv_cache_tokens"), ",")),
        ("max concurrency", conc),
        ("CUDA graphs", "—" if graphs is None else seconds_text(graphs)),
        ("init engine", "—" if init is None else seconds_text(init)),
        ("listening", p.get("listen_url") or "—"),
        ("ready", "yes" if p.get("ready") else "no"),
    ]


def worker_rows(workers: Any) -> list[tuple[str, str]]:
    """One row per worker process of the server, by rank (the CPU build's; a GPU box also shows them
    in its GPU panels): "TP1" "pid 7450 · 1.7 GiB". A worker whose title names no rank (TP=1's
    "VLLM::Worker", or one not yet given its rank) is "worker", not a rank with a question mark."""
    out = []
    for w in workers or []:
        rss = f" · {w['rss_bytes'] / 2**30:.1f} GiB" if w.get("rss_bytes") else ""
        out.append(("worker" if w.get("rank") is None else f"TP{w['rank']}", f"pid {w.get('pid')}{rss}"))
    return out


def phase_value(phase: str, start: float | None, seconds: float | None, first: float | None) -> str:
    """A phase's length; the one under way "…"; ready, which is not a phase but the end of them, says
    when it came (from the first phase's start: the start-up's length)."""
    if seconds is not None:
        return f"{seconds:.1f} s"
    if phase == "ready":
        return f"at {start - first:.1f} s" if start is not None and first is not None else "yes"
    return "…"


class FiguresPanel(Static):
    DEFAULT_CSS = """
    FiguresPanel { height: auto; }
    """

    def on_mount(self) -> None:
        self.border_title = "startup figures"
        self.show({})

    _shown: tuple[object, ...] | None = None

    def show(self, parsed: dict[str, Any], timeline: list[tuple[str, float | None, float | None]] | None = None,
             workers: Any = None) -> None:
        listed = worker_rows(workers)
        shown = (tuple(rows(parsed)), tuple((phase, seconds) for phase, _s, seconds in timeline or []),
                 tuple(listed))
        if shown == self._shown:  # nothing changed: no redraw (the poll runs 5 times a second)
            return
        self._shown = shown
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", overflow="fold")
        table.add_column(overflow="fold")  # wrapped, never cut with an ellipsis
        for name, value in rows(parsed) + listed:
            table.add_row(name, value)
        first = next((start for _p, start, _s in timeline or [] if start is not None), None)
        for phase, start, seconds in timeline or []:
            table.add_row(f"  ▸ {phase}", phase_value(phase, start, seconds, first))
        self.update(table)
