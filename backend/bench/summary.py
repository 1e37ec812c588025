"""The load test's results made into the `bench --json` figures, notes and text (loadtest.py runs the load)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from backend import energy

MAX_ERRORS = 5


# -- one request -----------------------------------------------------------------------------------
@dataclass
class RequestResult:
    index: int
    ok: bool = False
    ttft_s: float | None = None
    latency_s: float = 0.0
    output_tokens: int = 0
    prompt_tokens: int | None = None
    itl_s: list[float] = field(default_factory=list)  # gaps between content deltas
    decode_span_s: float | None = None  # first to last content delta
    decode_tokens_per_s: float | None = None
    burst: bool = False  # its tokens reached the client together: no rate (backend.chat.stream.ChatResult.burst)
    error: str | None = None
    fix: str = ""

    @property
    def error_text(self) -> str | None:
        return f"{self.error} (fix: {self.fix})" if self.error and self.fix else self.error

    @property
    def itl_mean_s(self) -> float | None:
        """Per token between the first and the last delta (deltas that carry several tokens count)."""
        if self.decode_span_s is None or self.output_tokens < 2:
            return None
        return self.decode_span_s / (self.output_tokens - 1)

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (latency - TTFT) / (tokens - 1), vLLM's TPOT."""
        if self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)



# -- aggregation -----------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between ranks (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _r(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def aggregate(results: list[RequestResult], wall_s: float) -> dict[str, Any]:
    """The measured part of the `bench --json` contract."""
    ok = [r for r in results if r.ok]
    errors: list[str] = []
    for r in results:
        text = r.error_text or ("" if r.ok else "failed")
        if not r.ok and text not in errors and len(errors) < MAX_ERRORS:
            errors.append(text)
    tokens = sum(r.output_tokens for r in ok)
    ttft_ms = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
    itl_ms = [g * 1000 for r in ok for g in r.itl_s]
    itl_means = [r.itl_mean_s * 1000 for r in ok if r.itl_mean_s is not None]
    latency = [r.latency_s for r in ok]
    decode = [r.decode_tokens_per_s for r in ok if r.decode_tokens_per_s is not None]
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    per_s = (lambda x: round(x / wall_s, 3)) if wall_s > 0 else (lambda x: None)
    tpot_ms = [r.tpot_s * 1000 for r in ok if r.tpot_s is not None]
    latency_ms = [x * 1000 for x in latency]
    return {
        "completed": len(ok), "failed": len(results) - len(ok), "errors": errors,
        "wall_s": round(wall_s, 3), "requests_per_s": per_s(len(ok)),
        "output_tokens": tokens, "output_tokens_per_s": per_s(tokens),
        "prompt_tokens": round(sum(prompts) / len(prompts)) if prompts else None,
        "ttft_ms": {**_spread(ttft_ms, 1, (50, 90, 99)), "max": _r(max(ttft_ms, default=None), 1)},
        "itl_ms": {"p50": _r(percentile(itl_ms, 50), 3), "p90": _r(percentile(itl_ms, 90), 3),
                   "mean": _r(sum(itl_means) / len(itl_means), 3) if itl_means else None,
                   "p99": _r(percentile(itl_ms, 99), 3), "pooled_mean": _r(_mean(itl_ms), 3),
                   "gaps": len(itl_ms)},
        "tpot_ms": _spread(tpot_ms, 3, (50, 90, 99)),
        "latency_s": {"p50": _r(percentile(latency, 50), 3), "p90": _r(percentile(latency, 90), 3),
                      "mean": _r(_mean(latency), 3), "p99": _r(percentile(latency, 99), 3)},
        "e2el_ms": _spread(latency_ms, 1, (50, 90, 99)),
        "decode_tokens_per_s_per_request": {"p50": _r(percentile(decode, 50), 1)},
        "burst_requests": sum(1 for r in ok if r.burst),
        "definitions": DEFINITIONS,
    }


DEFINITIONS = ("as vllm bench serve: TTFT = send to the first chunk with a choice; latency = send to the "
               "last such chunk; ITL = gaps between consecutive chunks, pooled over requests; TPOT = "
               "(latency - TTFT) / (tokens - 1) per request; tokens from the server's usage")


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _spread(xs: list[float], digits: int, qs: tuple[int, ...]) -> dict[str, float | None]:
    """mean, median and percentiles (vLLM's bench prints the same)."""
    out: dict[str, float | None] = {f"p{q}": _r(percentile(xs, q), digits) for q in qs}
    out["mean"] = _r(_mean(xs), digits)
    out["median"] = out.get("p50")
    return out


# -- notes -----------------------------------------------------------------------------------------
def capacity_notes(predicted: dict[str, Any], concurrency: int, tokens_per_request: int | None) -> list[str]:
    """Say when C exceeds what the KV cache holds or what the scheduler batches."""
    notes = []
    kv, mc, seqs = predicted.get("kv_cache_tokens"), predicted.get("max_concurrency"), predicted.get("max_num_seqs")
    fits = kv // tokens_per_request if kv and tokens_per_request else None
    if fits is not None and concurrency > fits:
        notes.append(f"concurrency {concurrency} exceeds the {fits:,} requests of {tokens_per_request:,} tokens "
                     f"the KV cache holds ({kv:,} tokens): requests will queue or be preempted")
    elif mc and concurrency > mc:
        notes.append(f"concurrency {concurrency} exceeds the {mc:,.6g} full-length sequences the KV cache holds; "
                     "these shorter requests fit, full-length ones would queue or be preempted")
    if seqs and concurrency > seqs:
        notes.append(f"concurrency {concurrency} exceeds server.max_num_seqs = {seqs}: the server runs "
                     f"{seqs} at a time and the rest wait in its queue (TTFT includes the wait)")
    return notes


def burst_notes(rep: dict[str, Any]) -> list[str]:
    """Most deltas arriving together means the server's API process or this client lacked CPU.
    Judged per request (ChatResult.burst: too few measurable gaps, or most tokens at one moment),
    as the chat's figures are: a pooled ITL p50 near 0 alone also comes from tokens that arrive in
    pairs, whose per-request rate is still measured (109.5 tok/s at concurrency 1 on the demo)."""
    if not is_burst(rep):
        return []
    return ["most tokens reached the client in bursts (no measurable gap between them): the API server "
            "or this client is short of CPU, so no per-request decode tok/s is given"]


def is_burst(rep: dict[str, Any]) -> bool:
    """Most completed requests came in bursts."""
    done = rep.get("completed") or 0
    if "burst_requests" in rep:
        return bool(done) and rep["burst_requests"] * 2 > done
    p50 = (rep.get("itl_ms") or {}).get("p50")  # a report from before burst_requests
    return p50 is not None and p50 < 0.1 and rep.get("output_tokens", 0) > 2 * max(1, done)


# -- the text --------------------------------------------------------------------------------------
def _fmt(x: float | None, spec: str = ".0f") -> str:
    return "n/a" if x is None else format(x, spec)


def summary_lines(rep: dict[str, Any]) -> list[str]:
    """The human-readable report: prediction first, then what was measured."""
    pred, srv = rep["predicted"], rep["server"]
    out = [f"bench: {rep['requests']} requests, {rep['concurrency']} in flight, prompt "
           f"{rep['prompt_tokens'] or '?'} tokens, {rep['max_tokens']} output tokens each -> "
           f"{srv['base_url']} ({srv['model']})"]
    said = []
    if pred.get("max_concurrency") is not None:
        kv, mml = pred.get("kv_cache_tokens"), pred.get("max_model_len")
        said.append(f"the cache holds {pred['max_concurrency']:,.6g}x sequences of {f'{mml:,}' if mml else '?'} "
                    f"({f'{kv:,}' if kv is not None else '?'} tokens, {pred.get('source')})")
    if pred.get("decode_ceiling_tokens_per_s"):
        said.append(f"the batch-1 ceiling is {pred['decode_ceiling_tokens_per_s']:.0f} tok/s")
    if said:
        out.append("predicted: " + "; ".join(said))
    ttft, itl, lat = rep["ttft_ms"], rep["itl_ms"], rep["latency_s"]
    tpot = rep.get("tpot_ms") or {}
    out += [f"measured: {rep['completed']}/{rep['requests']} completed in {rep['wall_s']:.1f} s: "
            f"{_fmt(rep['requests_per_s'], '.2f')} req/s, {_fmt(rep['output_tokens_per_s'], ',.1f')} output tok/s "
            f"({rep['output_tokens']:,} tokens)",
            f"  TTFT ms       mean {_fmt(ttft.get('mean'))}  p50 {_fmt(ttft['p50'])}  p90 {_fmt(ttft['p90'])}  "
            f"p99 {_fmt(ttft['p99'])}  max {_fmt(ttft['max'])}",
            f"  ITL ms        mean {_fmt(itl.get('pooled_mean'), '.1f')}  p50 {_fmt(itl['p50'], '.1f')}  "
            f"p90 {_fmt(itl['p90'], '.1f')}  p99 {_fmt(itl.get('p99'), '.1f')}  (pooled gaps, as vLLM)",
            f"  TPOT ms       mean {_fmt(tpot.get('mean'), '.1f')}  p50 {_fmt(tpot.get('p50'), '.1f')}  "
            f"p90 {_fmt(tpot.get('p90'), '.1f')}  p99 {_fmt(tpot.get('p99'), '.1f')}",
            f"  latency s     p50 {_fmt(lat['p50'], '.2f')}  p90 {_fmt(lat['p90'], '.2f')}",
            f"  decode tok/s  p50 {_fmt(rep['decode_tokens_per_s_per_request']['p50'], '.1f')} per request"]
    out.append(energy.line(rep))
    if rep["failed"]:
        out.append(f"failed: {rep['failed']}")
    out += [f"  error: {e}" for e in rep["errors"]]
    out += [f"note: {n}" for n in rep.get("notes") or []]
    return out
