"""The flight recorder: the supervisor's /metrics (and NVML) every few seconds, and its state changes, kept
in a bounded SQLite store in the state dir (history.db), so that `qwen-tui history` and the console's
history view can say what happened last night.

It runs on its own daemon thread: the supervisor's loop only puts events on a bounded queue
(`event()` never blocks, never raises) and reads `last` / `busy_at`. Each sample is one GET /metrics
(a 2 s timeout) parsed with prometheus_client after a line filter keeps only the families recorded
(the full text is mostly histograms nobody records here; parsing all of it was ~18 ms of CPU).

One row per sample holds gauges (running, waiting, KV cache use), rates over the interval (tokens/s),
counter deltas (preemptions, finished requests, HTTP requests by status) and the histogram's
per-bucket deltas of TTFT and queue time (sparse JSON, only buckets that moved): any window's
percentiles are then exact to the bucket, summed over its rows. At the default 5 s a day is 17,280 rows:
1.2 MiB idle, 2.4 MiB busy in every sample. Bounded by age (console.history_keep_h) and by rows.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DB_NAME = "history.db"
FAMILIES = {
    "running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
    "kv": "vllm:kv_cache_usage_perc", "kv_old": "vllm:gpu_cache_usage_perc",
    "gen": "vllm:generation_tokens", "prompt": "vllm:prompt_tokens", "preempt": "vllm:num_preemptions",
    "finished": "vllm:request_success", "ttft": "vllm:time_to_first_token_seconds",
    "queue": "vllm:request_queue_time_seconds", "http": "http_requests",
}
_NAMES = frozenset(FAMILIES.values())
_SUFFIXES = ("_total", "_bucket", "_sum", "_count")
EVENTS_MAX = 20_000
EVENT_QUEUE_MAX = 1_000
PRUNE_EVERY = 100  # samples between two prunes
FETCH_TIMEOUT_S = 2.0
SAMPLED_STATES = ("ready", "sleeping")

SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (t REAL NOT NULL, state TEXT, running REAL, waiting REAL, kv REAL,
    gen_tps REAL, prompt_tps REAL, preempt REAL, finished REAL, http TEXT, ttft TEXT, queue TEXT,
    gpu_mem REAL, gpu_power REAL);
CREATE INDEX IF NOT EXISTS samples_t ON samples (t);
CREATE TABLE IF NOT EXISTS events (t REAL NOT NULL, kind TEXT NOT NULL, detail TEXT);
CREATE INDEX IF NOT EXISTS events_t ON events (t);
"""


def db_path(state_dir: Path) -> Path:
    return state_dir / DB_NAME


def _base(name: str) -> str:
    for suf in _SUFFIXES:
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def _wanted_lines(text: str) -> str:
    """Only the lines of the recorded families (and their # TYPE lines), for the parser."""
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) > 2 and parts[1] == "TYPE" and (parts[2] in _NAMES or _base(parts[2]) in _NAMES):
                keep.append(line)
            continue
        end = len(line)
        for ch in "{ ":
            i = line.find(ch)
            if 0 <= i < end:
                end = i
        name = line[:end]
        if name.endswith("_created"):
            continue
        if name in _NAMES or _base(name) in _NAMES:
            keep.append(line)
    return "\n".join(keep) + "\n"


@dataclass
class Reading:
    """One /metrics read: gauges and cumulative counters, summed over engines and label sets."""

    at: float
    values: dict[str, float] = field(default_factory=dict)  # running, waiting, kv, gen, prompt, preempt, finished
    http: dict[str, float] = field(default_factory=dict)  # status ("2xx", "404") -> count
    ttft: dict[str, float] = field(default_factory=dict)  # le -> cumulative count
    queue: dict[str, float] = field(default_factory=dict)


def parse(text: str, at: float | None = None) -> Reading:
    """A Reading from /metrics text (prometheus_client's parser). Raises ValueError on malformed text."""
    from prometheus_client.parser import text_string_to_metric_families  # the supervisor's start-up

    r = Reading(at=time.time() if at is None else at)
    by_name = {v: k for k, v in FAMILIES.items()}
    try:
        for fam in text_string_to_metric_families(_wanted_lines(text)):
            key = by_name.get(fam.name) or by_name.get(_base(fam.name))
            if key is None:
                continue
            for s in fam.samples:
                if key in ("ttft", "queue"):
                    if s.name.endswith("_bucket"):
                        hist = r.ttft if key == "ttft" else r.queue
                        le = s.labels.get("le", "+Inf")
                        hist[le] = hist.get(le, 0.0) + float(s.value)
                elif key == "http":
                    if s.name.endswith("_total"):
                        status = s.labels.get("status", "?")
                        r.http[status] = r.http.get(status, 0.0) + float(s.value)
                        if s.labels.get("method") == "POST" and s.labels.get("handler", "").startswith("/v1/"):
                            r.values["gen_http"] = r.values.get("gen_http", 0.0) + float(s.value)  # wake on request
                elif not s.name.endswith("_created"):
                    k = "kv" if key == "kv_old" else key
                    r.values[k] = r.values.get(k, 0.0) + float(s.value)
    except (ValueError, TypeError, IndexError) as e:
        raise ValueError(f"malformed /metrics text: {e}") from None
    return r


def _delta(cur: float | None, prev: float | None) -> float | None:
    """A counter's increase; a counter that went down means a new server (it restarted at 0)."""
    if cur is None:
        return None
    if prev is None or cur < prev:
        return cur if prev is not None else None
    return cur - prev


def _hist_delta(cur: dict[str, float], prev: dict[str, float] | None) -> dict[str, float]:
    """Per-bucket (not cumulative) increments, only the buckets that moved."""
    if prev is None:
        return {}
    reset = any(cur.get(le, 0.0) < v for le, v in prev.items())
    base = {} if reset else prev
    les = sorted(cur, key=le_value)
    out, below_cur, below_prev = {}, 0.0, 0.0
    for le in les:
        c, p = cur[le], base.get(le, 0.0)
        n = (c - below_cur) - (p - below_prev)
        below_cur, below_prev = c, p
        if n > 0:
            out[le] = n
    return out


def le_value(le: str) -> float:
    return float("inf") if le in ("+Inf", "inf", "Inf") else float(le)


def row(cur: Reading, prev: Reading | None, state: str, gpu: tuple[float | None, float | None]) -> dict[str, Any]:
    """The stored row for one interval (prev -> cur)."""
    v, p = cur.values, (prev.values if prev else {})
    dt = cur.at - prev.at if prev and cur.at > prev.at else None

    def rate(k: str) -> float | None:
        d = _delta(v.get(k), p.get(k)) if prev else None
        return round(d / dt, 3) if d is not None and dt else None

    http = {}
    if prev is not None:
        for status, n in cur.http.items():
            d = _delta(n, prev.http.get(status, 0.0))
            if d:
                http[status] = d
    ttft, q = _hist_delta(cur.ttft, prev.ttft if prev else None), _hist_delta(cur.queue, prev.queue if prev else None)
    return {"t": round(cur.at, 3), "state": state, "running": v.get("running"), "waiting": v.get("waiting"),
            "kv": v.get("kv"), "gen_tps": rate("gen"), "prompt_tps": rate("prompt"),
            "preempt": _delta(v.get("preempt"), p.get("preempt")) if prev else None,
            "finished": _delta(v.get("finished"), p.get("finished")) if prev else None,
            "http": json.dumps(http, separators=(",", ":")) if http else None,
            "ttft": json.dumps(ttft, separators=(",", ":")) if ttft else None,
            "queue": json.dumps(q, separators=(",", ":")) if q else None,
            "gpu_mem": gpu[0], "gpu_power": gpu[1]}


def busy(cur: Reading, prev: Reading | None) -> bool:
    """Requests running or waiting now, or any served between the two reads (a short request can
    start and end between two samples: the counters say so)."""
    v = cur.values
    if (v.get("running") or 0) > 0 or (v.get("waiting") or 0) > 0:
        return True
    if prev is None:
        return False
    return any((v.get(k) or 0) != (prev.values.get(k) or 0) for k in ("finished", "gen", "prompt"))


class Store:
    """The SQLite file. One writer (the recorder's thread); readers open their own (history)."""

    def __init__(self, path: Path, keep_s: float, max_rows: int) -> None:
        self.path, self.keep_s, self.max_rows = path, keep_s, max_rows
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=1.0, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")  # `history` reads while the recorder writes
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        self.inserts = 0

    def add_sample(self, r: dict[str, Any]) -> None:
        cols = ", ".join(r)
        self.db.execute(f"INSERT INTO samples ({cols}) VALUES ({', '.join('?' * len(r))})", list(r.values()))
        self.db.commit()
        self.inserts += 1
        if self.inserts % PRUNE_EVERY == 1:
            self.prune()

    def add_events(self, events: list[tuple[float, str, str]]) -> None:
        self.db.executemany("INSERT INTO events (t, kind, detail) VALUES (?, ?, ?)", events)
        self.db.commit()

    def prune(self, now: float | None = None) -> None:
        cutoff = (time.time() if now is None else now) - self.keep_s
        for table, most in (("samples", self.max_rows), ("events", EVENTS_MAX)):
            self.db.execute(f"DELETE FROM {table} WHERE t < ?", (cutoff,))
            self.db.execute(f"DELETE FROM {table} WHERE rowid <= (SELECT max(rowid) FROM {table}) - ?", (most,))
        self.db.commit()

    def close(self) -> None:
        self.db.close()


def gpu_totals(gpus: Any) -> tuple[float | None, float | None]:
    """(memory used bytes, power W) summed over the monitored GPUs; None without NVML."""
    if gpus is None or not gpus.available():
        return None, None
    samples = gpus.sample()
    mem = [s.memory_used_bytes for s in samples]
    pw = [s.power_w for s in samples]
    return (float(sum(mem)) if mem and None not in mem else None,
            round(sum(pw), 1) if pw and None not in pw else None)


class Recorder:
    """The supervisor's recorder thread. `status()` gives (state, base_url); `event()` from anywhere."""

    def __init__(self, state_dir: Path, status: Callable[[], tuple[str, str | None]], *, interval_s: float = 5.0,
                 keep_h: float = 48.0, gpus: Any = None, api_key: str | None = None,
                 fetch: Callable[[str], str] | None = None) -> None:
        self.path = db_path(state_dir)
        self.status, self.interval, self.gpus = status, float(interval_s), gpus
        self.keep_s = float(keep_h) * 3600
        self.max_rows = int(self.keep_s / self.interval * 1.25) + 100  # restarts sample a little more often
        self.api_key = api_key
        self._fetch = fetch
        self._events: queue.Queue[tuple[float, str, str]] = queue.Queue(EVENT_QUEUE_MAX)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.prev: Reading | None = None
        self.last: dict[str, Any] | None = None  # the last row written
        self.busy_at: float | None = None  # time.time() of the last sample that saw a request
        self.error: str | None = None  # the last failure (a read, the store): kept, never raised
        self.samples = self.dropped_events = 0
        self._client: Any = None

    # -- from the supervisor's loop: never blocks -------------------------------------------------
    def event(self, kind: str, detail: str = "", at: float | None = None) -> None:
        try:
            self._events.put_nowait((time.time() if at is None else at, kind, detail[:500]))
        except queue.Full:
            self.dropped_events += 1

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="qwen-tui-recorder", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 3.0) -> None:
        """Ask the thread to write what is queued and end; waits at most `timeout` (a stuck write is abandoned)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            store = Store(self.path, self.keep_s, self.max_rows)
        except (sqlite3.Error, OSError) as e:
            self.error = f"history store {self.path}: {e}"
            return
        try:
            while True:
                self._write_events(store)
                if self._stop.is_set():
                    return
                self.tick(store)
                self._stop.wait(self.interval)
        finally:
            self._write_events(store)
            store.close()
            if self._client is not None:
                self._client.close()

    def _write_events(self, store: Store) -> None:
        batch = []
        while True:
            try:
                batch.append(self._events.get_nowait())
            except queue.Empty:
                break
        if batch:
            try:
                store.add_events(batch)
            except sqlite3.Error as e:
                self.error = f"history store: {e}"

    def _get(self, base_url: str) -> str:
        if self._fetch is not None:
            return self._fetch(base_url)
        if self._client is None:
            from backend.httpclient import sync_client  # httpx is the supervisor's already; this keeps it lazy

            self._client = sync_client(api_key=self.api_key, timeout=FETCH_TIMEOUT_S)
        resp = self._client.get(base_url.rstrip("/") + "/metrics")
        if resp.status_code != 200:
            raise ValueError(f"/metrics: HTTP {resp.status_code}")
        return str(resp.text)

    def tick(self, store: Store) -> None:
        """One sample (only while the server is READY or asleep: a starting one has no /metrics)."""
        state, base_url = self.status()
        if state not in SAMPLED_STATES or not base_url:
            self.prev = None  # the next server's counters start again
            return
        try:
            cur = parse(self._get(base_url))
        except Exception as e:  # noqa: BLE001 - a read that fails is a gap in the history, nothing more
            self.error = f"/metrics: {type(e).__name__}: {e}"
            return
        try:
            gpu = gpu_totals(self.gpus)
        except Exception:  # noqa: BLE001 - NVML trouble: the row goes without GPU figures
            gpu = (None, None)
        if busy(cur, self.prev):
            self.busy_at = cur.at
        r = row(cur, self.prev, state, gpu)
        try:
            store.add_sample(r)
        except sqlite3.Error as e:
            self.error = f"history store: {e}"
            return
        self.prev, self.last = cur, r
        self.samples += 1


def attach(sup: Any) -> Recorder:
    """The recorder of one supervisor (backend/server/supervisor.py), started: its settings, state dir and GPUs."""
    console = sup.settings.console_cfg
    rec = Recorder(sup.state_path.parent, lambda: (sup.state, sup.settings.base_url),
                   interval_s=float(console.history_interval_s or 5.0),
                   keep_h=float(console.history_keep_h or 48.0), gpus=sup.gpus,
                   api_key=sup.launch.secret_env.get("VLLM_API_KEY"))
    rec.start()
    return rec
