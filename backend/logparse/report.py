"""The full report of a parsed log: `qwen-tui parse-log --json`, and what the text summary prints from.

The first keys are LogParser.snapshot()'s contract, unchanged and in order; the rest carry everything else the
summary shows, so the JSON always holds at least what the text does (the summary reads from here).
"""

from __future__ import annotations

from typing import Any

from backend.logparse.handler import ParseState

# Figures beyond the snapshot's, by the name the summary and the JSON use.
EXTRA_FIGURES = ("model", "max_model_len", "compile_seconds", "cuda_graph_gib", "cuda_graph_count",
                 "cuda_graph_estimate_gib", "non_torch_gib", "activation_peak_gib")


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


def report(p: ParseState) -> dict[str, Any]:
    out = p.snapshot()
    f = p.figures
    for name in EXTRA_FIGURES:
        out[name] = f.get(name)
    lines = p.kv_token_lines
    out["kv_cache_tokens_per_worker"] = list(lines) if len(lines) > 1 else None
    out["per_rank"] = {name: {str(r): v for r, v in ranks.items()} for name, ranks in p.per_rank.items()}
    launch = p.launch
    out["launched_at"] = launch.unix if launch is not None else None
    out["timeline"] = timeline(p)
    out["failure_permanent"] = p.failure_is_permanent()
    return out
