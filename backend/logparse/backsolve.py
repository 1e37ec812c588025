"""What a log without vLLM's breakdown line still tells of its memory terms, per worker (issue 27).

vLLM prints its own ledger line from 0.32 (DEBUG in 0.1x-0.2x). Older logs, and INFO logs of 0.1x-0.2x, have
only some of the figures; the rest follow from how that version computes its KV budget
(backend/ledger/versions.py):

    KV = requested - non_kv,  requested = utilization x CUDA total,  non_kv = weights + activation + non-torch
         (+ the CUDA-graph estimate from 0.20)

Lines read (their wording per version: ../shared/notes/vllm-log-formats.md):
- V0 0.6.5-0.10 `total_gpu_memory (T GiB) x gpu_memory_utilization (U) = R GiB` + `model weights take W; non_torch_
  memory takes N; PyTorch activation peak memory takes A; the rest of the memory reserved for KV Cache is K`;
- V0 0.6.4 `Memory profiling results: total_gpu_memory=T initial_memory_usage=I peak_torch_memory=P ... non_torch_
  memory=N kv_cache_size=K gpu_memory_utilization=U` (P is weights + activation);
- V1 `Model loading took W GiB`, `Available KV cache memory: K GiB`, `Estimated CUDA graph memory: G GiB`,
  `Graph capturing finished in S secs, took G GiB`, the free-memory check `Free memory on device (F/T GiB)`,
  `Desired GPU memory utilization is (U, R GiB)`, and the utilization from the arguments line.
A term that needs the CUDA total (V1 INFO logs print none) is derived only when the caller gives it (`total_gib`,
e.g. NVML's total less its reserved share).
"""

from __future__ import annotations

import re
from typing import Any

# terms this module fills, by the name `parse-log --json` gives them under "backsolved"
TERMS = ("total_gib", "requested_gib", "weights_gib", "activation_peak_gib", "non_torch_gib",
         "activation_and_non_torch_gib", "non_kv_gib", "cuda_graph_estimate_gib", "cuda_graph_gib", "kv_cache_gib")


def _r(x: float) -> float:
    return round(x, 2)


def graphs_in_budget(version: str | None) -> bool:
    """vLLM >= 0.20 takes its CUDA-graph estimate off the budget by default (backend/ledger/versions.py; this
    package does not import the ledger, which imports it)."""
    m = re.match(r"v?(\d+)\.(\d+)", version or "")
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (0, 20)


def backsolve(rank_figures: dict[str, dict[int, Any]], figures: dict[str, Any], info: dict[str, Any],
              total_gib: float | None = None, version: str | None = None) -> dict[str, dict[str, Any]]:
    """{rank: {term: GiB, "derived": [the terms computed, not read]}} for every worker with a KV figure."""
    out: dict[str, dict[str, Any]] = {}
    kv = rank_figures.get("kv_cache_gib", {})
    util = info.get("gpu_memory_utilization") or figures.get("gpu_memory_utilization")
    for r in sorted(kv):
        def fig(name: str, r: int = r) -> Any:
            per = rank_figures.get(name, {})
            return per.get(r, per.get(0) if len(per) == 1 else None)

        t: dict[str, Any] = {"kv_cache_gib": kv[r]}
        derived: list[str] = []
        total = fig("device_total_gib") or figures.get("total_gpu_gib") or total_gib
        if total:
            t["total_gib"] = total
        req = fig("requested_gib")
        if req is None and total and util:
            req = _r(total * float(util))
            derived.append("requested_gib")
        if req is not None:
            t["requested_gib"] = req
        w = fig("breakdown_weights_gib") or fig("weights_gib")
        if w is not None:
            t["weights_gib"] = w
        act, nt, peak = fig("activation_peak_gib"), fig("non_torch_gib"), fig("peak_torch_gib")
        if act is None and peak is not None and w is not None:  # V0 0.6.4: the torch peak holds the weights
            act = _r(peak - w)
            derived.append("activation_peak_gib")
        if act is not None:
            t["activation_peak_gib"] = act
        if nt is not None:
            t["non_torch_gib"] = nt
        if req is not None:
            t["non_kv_gib"] = _r(req - kv[r])
            derived.append("non_kv_gib")
            if w is not None and (act is None or nt is None):
                graphs = fig("cuda_graph_memory_gib")
                if graphs is None:
                    graphs = (figures.get("cuda_graph_estimate_gib") or 0.0) if graphs_in_budget(version) else 0.0
                t["activation_and_non_torch_gib"] = _r(req - kv[r] - w - graphs)
                derived.append("activation_and_non_torch_gib")
        est = figures.get("cuda_graph_estimate_gib")
        if est is not None:
            t["cuda_graph_estimate_gib"] = est
        cap = fig("cuda_graph_memory_gib") or fig("cuda_graph_gib")
        if cap is not None:
            t["cuda_graph_gib"] = cap
        t["derived"] = derived
        out[str(r)] = t
    return out
