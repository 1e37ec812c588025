"""vLLM's Prometheus /metrics, read into the few live figures the console shows.

`samples()` parses everything with prometheus_client (``text_string_to_metric_families``); the console's
snapshot reads only the lines it shows (`wanted_samples`, same sums). Names follow vLLM's versions
(vllm/engine/metrics.py for V0, vllm/v1/metrics/loggers.py for V1): KV cache usage is
``vllm:kv_cache_usage_perc`` from 0.9.2 ("Deprecated in 0.9.2 - Renamed as vllm:kv_cache_usage_perc" in
loggers.py) and ``vllm:gpu_cache_usage_perc`` before (a 0-1 fraction despite the name); counters are declared
without ``_total`` and exposed by prometheus_client as ``…_total``. Samples are summed over labels
(model_name, engine), so data-parallel engines add up. Rates come from two snapshots: Δcounter / Δt.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families


class MetricsError(Exception):
    """/metrics could not be read or parsed; the message says which."""


# figure -> metric names to try, newest first
NAMES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "preemptions": ("vllm:num_preemptions_total",),
    "requests_finished": ("vllm:request_success_total",),
    "ttft_sum": ("vllm:time_to_first_token_seconds_sum",),
    "ttft_count": ("vllm:time_to_first_token_seconds_count",),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
}


@dataclass(frozen=True)
class Snapshot:
    at: float  # time.monotonic() of the read
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None  # 0-1
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    preemptions: float | None = None
    requests_finished: float | None = None
    ttft_sum: float | None = None
    ttft_count: float | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("at")
        return d


def samples(text: str) -> dict[str, float]:
    """Sample name -> value summed over its label sets. Raises MetricsError on malformed text."""
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[s.name] = out.get(s.name, 0.0) + float(s.value)
    except (ValueError, TypeError, IndexError) as e:
        raise MetricsError(f"malformed /metrics text: {e}") from None
    return out


_WANTED = frozenset(n for names in NAMES.values() for n in names)


def wanted_samples(text: str, names: frozenset[str] = _WANTED) -> dict[str, float]:
    """Like samples(), for `names` only, in one pass over the lines: vLLM's /metrics is mostly
    histogram buckets the console never shows, and prometheus_client parsing all of it cost ~18 ms
    of CPU per read (~2 % of an idle core at one read a second). Raises MetricsError on a malformed
    line of a wanted metric."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        brace, space = line.find("{"), line.find(" ")
        end = brace if 0 <= brace < space or (brace >= 0 and space < 0) else space
        name = line[:end] if end > 0 else line
        if name not in names:
            continue
        rest = line[end:]
        if rest.startswith("{"):
            close = rest.rfind("}")
            if close < 0:
                raise MetricsError(f"malformed /metrics text: {line[:120]!r}")
            rest = rest[close + 1:]
        try:
            value = float(rest.split()[0])
        except (ValueError, IndexError):
            raise MetricsError(f"malformed /metrics text: {line[:120]!r}") from None
        out[name] = out.get(name, 0.0) + value
    return out


def snapshot(text: str, at: float | None = None) -> Snapshot:
    values = wanted_samples(text)
    found: dict[str, float] = {}
    for figure, names in NAMES.items():
        for name in names:
            if name in values:
                found[figure] = values[name]
                break
    return Snapshot(at=time.monotonic() if at is None else at, **found)


# The supervisor's "usable means it generates" completion (backend/server/health.py, before READY) is
# in vLLM's counters: its tokens and its one request are taken out of what the user is shown.
# (TTFT is shown only as a mean over an interval after READY, which the probe is not in.)
_PROBE_COUNTERS = {"prompt_tokens": "prompt_tokens", "generation_tokens": "completion_tokens",
                   "requests_finished": "requests"}


def without_probe(snap: Snapshot, probe: dict[str, Any] | None) -> Snapshot:
    """`snap` less the readiness probe's request (status's `probe`); unchanged without one."""
    if not probe or not probe.get("ok"):
        return snap
    changes = {}
    for figure, key in _PROBE_COUNTERS.items():
        cur, done = getattr(snap, figure), probe.get(key)
        if cur is not None and isinstance(done, (int, float)):
            changes[figure] = max(0.0, cur - done)
    return replace(snap, **changes)


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def rates(prev: Snapshot | None, cur: Snapshot) -> dict[str, float | None]:
    """Per-second rates and interval means between two snapshots (None where not computable)."""
    out: dict[str, float | None] = {"generation_tokens_per_s": None, "prompt_tokens_per_s": None,
                                    "ttft_mean_s": None, "prefix_hit_rate": None}
    if prev is None or cur.at <= prev.at:
        return out
    dt = cur.at - prev.at
    gen, prompt = _delta(prev.generation_tokens, cur.generation_tokens), _delta(prev.prompt_tokens, cur.prompt_tokens)
    # a counter that went down means the server restarted: no rate for this interval
    out["generation_tokens_per_s"] = gen / dt if gen is not None and gen >= 0 else None
    out["prompt_tokens_per_s"] = prompt / dt if prompt is not None and prompt >= 0 else None
    n = _delta(prev.ttft_count, cur.ttft_count)
    total = _delta(prev.ttft_sum, cur.ttft_sum)
    if n and n > 0 and total is not None:
        out["ttft_mean_s"] = total / n
    q = _delta(prev.prefix_queries, cur.prefix_queries)
    h = _delta(prev.prefix_hits, cur.prefix_hits)
    if q and q > 0 and h is not None:
        out["prefix_hit_rate"] = h / q
    return out


def fetch(base_url: str, timeout: float = 2.0, client: httpx.Client | None = None) -> Snapshot:
    """GET /metrics (loopback; never through a proxy). Raises MetricsError with the reason.
    Pass a long-lived `client` when polling (MetricsReader): a new one per call costs CPU."""
    url = base_url.rstrip("/") + "/metrics"
    try:
        if client is not None:
            resp = client.get(url, timeout=timeout)
        else:
            from backend.httpclient import sync_client  # httpx only once a request is made: start-up

            with sync_client(timeout=timeout) as one_off:
                resp = one_off.get(url)
    except httpx.HTTPError as e:
        raise MetricsError(f"cannot read {url}: {e}") from None
    if resp.status_code != 200:
        raise MetricsError(f"{url}: HTTP {resp.status_code}")
    return snapshot(resp.text)


class MetricsReader:
    """The console's /metrics poll: one HTTP client (and connection) for all its reads.

    Building an httpx client per read (its TLS context, its pool) was ~15 % of an idle console's
    CPU. Blocking; call `fetch` from one worker thread at a time.
    """

    def __init__(self, api_key: str | None = None, timeout: float = 2.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.api_key, self.timeout, self.transport = api_key, timeout, transport
        self._client: httpx.Client | None = None
        self.clients_made = 0

    def fetch(self, base_url: str) -> Snapshot:
        if self._client is None:
            from backend.httpclient import sync_client  # httpx only once a request is made: start-up

            self._client = sync_client(api_key=self.api_key, timeout=self.timeout, transport=self.transport)
            self.clients_made += 1
        return fetch(base_url, self.timeout, client=self._client)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
