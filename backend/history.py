"""Reading the flight recorder (backend/recorder.py): a window of samples and events, binned for a
chart, with percentiles from the summed histogram buckets (as Prometheus's histogram_quantile does:
linear within the bucket the rank falls in). Read-only; opens the store with a short timeout."""

from __future__ import annotations

import json
import math
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.recorder import le_value

COLUMNS = ("t", "state", "running", "waiting", "kv", "gen_tps", "prompt_tps", "preempt", "finished", "http",
           "ttft", "queue", "gpu_mem", "gpu_power")
_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class HistoryError(Exception):
    """Bad input (a --since that is not a duration) or an unreadable store; the message says which."""


def parse_since(text: str) -> float:
    """'90s', '30m', '12h', '2d' or plain seconds -> seconds."""
    m = _SINCE.match(text or "")
    if not m or float(m.group(1)) <= 0:
        raise HistoryError(f"--since {text!r}: give a duration such as 30m, 12h or 2d")
    return float(m.group(1)) * _UNIT[m.group(2)]


@dataclass
class Window:
    start: float
    end: float
    samples: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def load(path: Path, since_s: float, now: float | None = None) -> Window:
    """The samples and events of the last `since_s` seconds (an empty window when there is no store yet)."""
    end = time.time() if now is None else now
    win = Window(end - since_s, end)
    if not path.exists():
        return win
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0)
        try:
            db.row_factory = sqlite3.Row
            win.samples = [dict(r) for r in db.execute(
                f"SELECT {', '.join(COLUMNS)} FROM samples WHERE t >= ? AND t <= ? ORDER BY t", (win.start, end))]
            win.events = [dict(r) for r in db.execute(
                "SELECT t, kind, detail FROM events WHERE t >= ? AND t <= ? ORDER BY t", (win.start, end))]
        finally:
            db.close()
    except sqlite3.Error as e:
        raise HistoryError(f"cannot read the history store {path}: {e}") from None
    for s in win.samples:
        for k in ("http", "ttft", "queue"):
            s[k] = json.loads(s[k]) if s.get(k) else {}
    return win


def merge(hists: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for h in hists:
        for le, n in h.items():
            out[le] = out.get(le, 0.0) + n
    return out


def quantile(q: float, hist: dict[str, float]) -> float | None:
    """The q-quantile of per-bucket counts {le: n}; None when empty. A rank in +Inf gives the highest finite le."""
    items = sorted(((le_value(le), n) for le, n in hist.items() if n > 0), key=lambda x: x[0])
    total = sum(n for _, n in items)
    if total <= 0:
        return None
    rank, seen, lower = q * total, 0.0, 0.0
    finite = [le for le, _ in items if math.isfinite(le)]
    for le, n in items:
        if seen + n >= rank:
            if not math.isfinite(le):
                return finite[-1] if finite else None
            return lower + (le - lower) * ((rank - seen) / n)
        seen += n
        lower = le
    return lower


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _vals(rows: list[dict[str, Any]], k: str) -> list[float]:
    return [float(r[k]) for r in rows if r.get(k) is not None]


def is_error(status: str) -> bool:
    return not (status.startswith("2") or status.startswith("3"))


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One bin (or the whole window): maxima of the gauges, means of the rates, sums of the counts,
    percentiles from the merged buckets."""
    ttft, qt = merge([r["ttft"] for r in rows]), merge([r["queue"] for r in rows])
    http = merge([r["http"] for r in rows])
    mx = {k: max(_vals(rows, k), default=None) for k in ("running", "waiting", "kv", "gpu_mem")}
    return {
        "samples": len(rows),
        "running_max": mx["running"], "waiting_max": mx["waiting"],
        "kv_cache_usage_max": mx["kv"],
        "generation_tokens_per_s": _mean(_vals(rows, "gen_tps")),
        "prompt_tokens_per_s": _mean(_vals(rows, "prompt_tps")),
        "requests_finished": sum(_vals(rows, "finished")),
        "preemptions": sum(_vals(rows, "preempt")),
        "http_requests": {k: int(v) for k, v in sorted(http.items())},
        "http_errors": int(sum(v for k, v in http.items() if is_error(k))),
        "ttft_p50_s": quantile(0.5, ttft), "ttft_p90_s": quantile(0.9, ttft), "ttft_p99_s": quantile(0.99, ttft),
        "queue_p50_s": quantile(0.5, qt), "queue_p99_s": quantile(0.99, qt),
        "gpu_memory_used_bytes_max": mx["gpu_mem"],
        "gpu_power_w_mean": _mean(_vals(rows, "gpu_power")),
    }


def bins(win: Window, n: int) -> list[dict[str, Any]]:
    """`n` equal slices of the window, each summarized (samples 0: no data then)."""
    width = (win.end - win.start) / max(1, n)
    groups: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    for s in win.samples:
        i = min(n - 1, max(0, int((s["t"] - win.start) / width)))
        groups[i].append(s)
    return [dict(summarize(g), start=win.start + i * width) for i, g in enumerate(groups)]


def event_bin(win: Window, n: int, t: float) -> int:
    width = (win.end - win.start) / max(1, n)
    return min(n - 1, max(0, int((t - win.start) / width)))


def to_json(win: Window, n_bins: int) -> dict[str, Any]:
    return {"start": win.start, "end": win.end, "summary": summarize(win.samples), "events": win.events,
            "bins": bins(win, n_bins), "samples": win.samples}


CSV_COLUMNS = ("t", "time", "state", "running", "waiting", "kv", "gen_tps", "prompt_tps", "preempt", "finished",
               "http_2xx", "http_errors", "ttft_p50_s", "queue_p50_s", "gpu_mem", "gpu_power")


def csv_rows(win: Window) -> list[list[Any]]:
    """One row per sample (its interval's TTFT/queue median), then one row per event (state = the event)."""
    out: list[list[Any]] = []
    for s in win.samples:
        ok = sum(v for k, v in s["http"].items() if not is_error(k))
        bad = sum(v for k, v in s["http"].items() if is_error(k))
        out.append([s["t"], time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["t"])), s["state"], s["running"],
                    s["waiting"], s["kv"], s["gen_tps"], s["prompt_tps"], s["preempt"], s["finished"], ok, bad,
                    quantile(0.5, s["ttft"]), quantile(0.5, s["queue"]), s["gpu_mem"], s["gpu_power"]])
    for e in win.events:
        out.append([e["t"], time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["t"])), f"event:{e['kind']}"]
                   + [None] * (len(CSV_COLUMNS) - 3))
    out.sort(key=lambda r: r[0])
    return out
