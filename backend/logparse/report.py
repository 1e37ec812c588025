"""The full report of a parsed log: `qwen-tui parse-log --json`, and what the text summary prints from.

The first keys are LogParser.snapshot()'s contract, unchanged and in order; the rest carry everything else the
summary shows, so the JSON always holds at least what the text does (the summary reads from here).
"""

from __future__ import annotations

from typing import Any

from backend.logparse.backsolve import backsolve
from backend.logparse.handler import ParseState

# Figures beyond the snapshot's, by the name the summary and the JSON use.
EXTRA_FIGURES = ("model", "max_model_len", "compile_seconds", "cuda_graph_gib", "cuda_graph_count",
                 "cuda_graph_estimate_gib", "non_torch_gib", "activation_peak_gib", "auto_fit", "auto_fit_from",
                 "startup_plan_applied", "startup_plan_saved", "compile_cache", "compile_cache_key")
# vLLM's own memory terms, per worker (GPU breakdown line, CPU "Auto set" line, the weights line)
BREAKDOWN_TERMS = ("device_total_gib", "device_free_gib", "node_total_gib", "numa_node", "requested_gib",
                   "weights_gib", "breakdown_weights_gib", "non_torch_gib", "consumed_gib", "non_kv_gib",
                   "activation_peak_gib", "cuda_graph_memory_gib", "cuda_graph_gib", "kv_cache_gib",
                   "kv_cache_in_use_gib", "kv_cache_memory_to_requested", "kv_cache_memory_to_gpu",
                   "startup_plan_kv_bytes")


def breakdown(p: ParseState) -> dict[str, dict[str, Any]]:
    """{rank: {term: value}} for every worker that logged a memory term; {} when none did."""
    out: dict[str, dict[str, Any]] = {}
    for term in BREAKDOWN_TERMS:
        for r, v in p.rank_figures.get(term, {}).items():
            out.setdefault(str(r), {})[term] = v
    if not any(k in t for t in out.values() for k in ("requested_gib", "consumed_gib", "non_kv_gib")):
        return {}  # only a weights line: no breakdown
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def timeline(p: ParseState) -> list[dict[str, Any]]:
    """[{phase, at_s (seconds since the first milestone, the launch when the log has the marker), seconds
    (until the next milestone)}]; None where the log gives no time."""
    out = []
    durations = p.phase_durations()
    t0 = next((t for _, t, _ in durations if t is not None), None)
    for phase, t, d in durations:
        at = round(t - t0, 3) if (t is not None and t0 is not None) else None
        out.append({"phase": phase, "at_s": at, "seconds": round(d, 3) if d is not None else None})
    return out


def rank_table(p: ParseState) -> dict[str, dict[str, Any]]:
    """figure -> rank (a string: JSON keys) -> value, for every figure more than one worker logged."""
    return {name: {str(r): v for r, v in ranks.items()} for name, ranks in p.every_rank.items()}


def report(p: ParseState) -> dict[str, Any]:
    out = p.snapshot()
    f = p.figures
    for name in EXTRA_FIGURES:
        out[name] = f.get(name)
    lines = p.kv_token_lines
    out["kv_cache_tokens_per_worker"] = list(lines) if len(lines) > 1 else None
    out["breakdown"] = breakdown(p)
    # the terms the lines imply where vLLM printed no breakdown (older vLLM, INFO logs): backsolve.py
    out["backsolved"] = backsolve(p.rank_figures, p.figures, p.info, version=out.get("vllm_version"))
    out["per_rank"] = rank_table(p)
    launch = p.launch
    out["launched_at"] = launch.unix if launch is not None else None
    out["timeline"] = timeline(p)
    out["failure_permanent"] = p.failure_is_permanent()
    return out
