"""FiguresPanel: what the startup log says — version, weights, KV cache, concurrency, graphs.

Two columns, the names bold, a value too long for its column wrapped under itself (not under the
name). Laid out here as Textual Content, not a Rich Table: the table's measuring and rendering, done
once for the height and once for the paint, cost ~3.5 ms of the console's first frame."""

from __future__ import annotations

import textwrap
from typing import Any

from textual.content import Content
from textual.widget import Widget


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


MIN_VALUE_W = 14  # a value column narrower than this wraps every figure; the names wrap first


def _wrap(text: str, width: int) -> list[str]:
    """Word-wrapped, a word longer than the column folded; at least one line."""
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def layout(pairs: list[tuple[str, str]], width: int) -> list[tuple[str, str]]:
    """The (name, value) rows as screen lines `width` wide: each line's name part (padded to the name
    column) and value part. The name column is the longest name. Where a value would wrap, it narrows
    first to the longest name that is not indented: an indented row (a start-up phase, "  ▸ loading_weights")
    then runs its value on past the column when the line has room. Below that, it narrows (its names
    wrapped) only as far as it leaves the values MIN_VALUE_W columns."""
    if not pairs:
        return []
    width = max(width, 3)
    name_w = max(len(name) for name, _ in pairs)
    value_w = max(len(value) for _, value in pairs)
    if name_w + 1 + value_w > width:
        plain = max((len(name) for name, _ in pairs if not name.startswith(" ")), default=name_w)
        name_w = max(plain, width - 1 - value_w)
        value_w = max(width - name_w - 1, min(value_w, MIN_VALUE_W, width - 2))
        name_w = width - 1 - value_w
    lines = []
    for name, value in pairs:
        if len(name) > name_w and len(name) + 1 + len(value) <= width:
            lines.append((name, value))  # an indented row's name past the column, its value after it
            continue
        names, values = _wrap(name, name_w), _wrap(value, value_w)
        for n in range(max(len(names), len(values))):
            lines.append(((names[n] if n < len(names) else "").ljust(name_w),
                          values[n] if n < len(values) else ""))
    return lines


class FiguresPanel(Widget):
    DEFAULT_CSS = """
    FiguresPanel { height: auto; }
    """

    def on_mount(self) -> None:
        self.border_title = "startup figures"
        self.show({})

    _shown: tuple[object, ...] | None = None
    pairs: list[tuple[str, str]] = []  # what is shown: (name, value), in order

    def show(self, parsed: dict[str, Any], timeline: list[tuple[str, float | None, float | None]] | None = None,
             workers: Any = None) -> None:
        listed = worker_rows(workers)
        shown = (tuple(rows(parsed)), tuple((phase, seconds) for phase, _s, seconds in timeline or []),
                 tuple(listed))
        if shown == self._shown:  # nothing changed: no redraw (the poll runs 5 times a second)
            return
        self._shown = shown
        first = next((start for _p, start, _s in timeline or [] if start is not None), None)
        self.pairs = rows(parsed) + listed + [(f"  ▸ {phase}", phase_value(phase, start, seconds, first))
                                              for phase, start, seconds in timeline or []]
        self.refresh(layout=True)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return len(layout(self.pairs, width))

    def render(self) -> Content:
        return Content("\n").join(Content.assemble((name, "bold"), " ", value)
                                  for name, value in layout(self.pairs, self.size.width))
