"""How vLLM sizes its KV cache, version range by version range: the accounting as data.

Read from vLLM's released wheels (a wheel `vllm==X` is tag vX), the function that turns the profile run
into a KV budget: `Worker.determine_num_available_blocks` (V0, vllm/worker/worker.py) and
`Worker.determine_available_memory` (V1, vllm/v1/worker/gpu_worker.py), with the profiler they call
(`memory_profiling`/`MemorySnapshot`: vllm/utils.py to 0.6.6.post1, vllm/utils/__init__.py to 0.11,
vllm/utils/mem_utils.py from 0.12), the block count and printed tokens (vllm/v1/core/kv_cache_utils.py
`get_num_blocks`, `_report_kv_cache_config`), the defaults (vllm/config/cache.py, vllm/engine/arg_utils.py)
and the CUDA-graph switch (vllm/envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS). Versions read: 0.5.5,
0.6.3.post1, 0.6.4.post1, 0.6.5, 0.6.6.post1, 0.7.0, 0.7.3, 0.8.0, 0.8.5.post1, 0.9.0, 0.9.2, 0.10.1.1, 0.10.2,
0.11.0, 0.12.0, 0.13.0, 0.14.0, 0.15.1, 0.16.0, 0.17.0, 0.18.0, 0.19.1, 0.20.2, 0.24.0, 0.28.0, 0.32.0, 0.33.0.
A change between two read versions is put at the later one (e.g. the large-card defaults at 0.8.5).

Every range budgets `gpu_memory_utilization x the CUDA total` (cudaMemGetInfo's total, not the free memory);
what differs is what is taken off it before the KV cache (`non_kv`), whether the CUDA context and other
processes' memory fall in it, and whether CUDA graphs (captured after the KV cache is allocated) are estimated
and taken off first. backend.ledger.overheads.behaviour() reads its switches from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Range:
    id: str
    engine: str  # "v0" | "v1"
    lo: Version  # first version of the range
    hi: Version | None  # first version after it (None: still current)
    non_kv: str  # what vLLM takes off the budget, as its source computes it
    context_counted: bool  # the CUDA context (created before the start snapshot or not) is in non_kv
    other_processes_counted: bool  # memory other processes held at the start is in non_kv
    activation: str  # how the activation peak is measured
    cudagraphs: str  # "after" (captured after the KV cache, not budgeted) | "flag" | "estimated"
    startup_check: bool  # refuses to start when free memory < utilization x total
    tokens: str  # how the printed KV tokens come from the blocks
    sources: tuple[str, ...]

    @property
    def label(self) -> str:
        hi = f"< {'.'.join(map(str, self.hi))}" if self.hi else "and later"
        return f"{self.engine.upper()} {'.'.join(map(str, self.lo))} {hi}"

    def holds(self, v: Version) -> bool:
        return self.lo <= v and (self.hi is None or v < self.hi)

    def terms(self) -> dict[str, Any]:
        graphs = {"after": "captured after the KV cache is allocated: not in the budget (they use the "
                           "1 - utilization margin)",
                  "flag": "estimated (profile_cudagraph_memory) but taken off the budget only with "
                          "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (default 0)",
                  "estimated": "estimated and taken off the budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS "
                               "default 1; =0 turns it off)"}[self.cudagraphs]
        return {"budget": "gpu_memory_utilization x CUDA total memory (cudaMemGetInfo), per GPU",
                "non_kv": self.non_kv, "activation_peak": self.activation,
                "cuda_context": "counted" if self.context_counted else "not counted (in the start baseline)",
                "other_processes": ("counted (total - free includes them)" if self.other_processes_counted
                                    else "not counted (in the start baseline)"),
                "cuda_graphs": graphs,
                "startup_check": ("refuses when free memory at start < utilization x total" if self.startup_check
                                  else "none"),
                "torch_compile": ("none (V0 captures CUDA graphs only)" if self.engine == "v0" else
                                  "the first start compiles inside the profile run, so its memory is in the peak; "
                                  "the cold-start extra is measured on 0.20.2 and modelled from 0.20 only"),
                "blocks": "floor(KV memory / (block_size x KV bytes per token on the GPU))",
                "tokens": self.tokens}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "engine": self.engine,
                "from": ".".join(map(str, self.lo)), "before": ".".join(map(str, self.hi)) if self.hi else None,
                "terms": self.terms(), "sources": list(self.sources)}


_BLOCKS_X = "blocks x block_size"
_FROM_CONC = "int(max concurrency x max_model_len) (equal to blocks x block_size when max_model_len is a multiple)"
_ALLOC_PEAK = "torch allocated_bytes.all.peak over the profile run, less the weights"

RANGES: tuple[Range, ...] = (
    # worker.py@v0.5.5 and @v0.6.3.post1: peak_memory = init_gpu_memory - free after profile_run, where
    # init_gpu_memory is read in init_device after set_device (context in it) and before the distributed init
    Range("v0-free-drop", "v0", (0, 0, 0), (0, 6, 4),
          "free memory at worker start - free memory after the profile run (weights, activation as the "
          "allocator holds it, NCCL and workspaces)", False, False,
          "what the caching allocator still holds after the profile run (no empty_cache before the reading)",
          "after", False, _BLOCKS_X,
          ("vllm/worker/worker.py@v0.5.5 determine_num_available_blocks",
           "vllm/worker/worker.py@v0.6.3.post1 determine_num_available_blocks")),
    # worker.py@v0.6.4.post1: peak = allocated peak + (total - free - torch allocated) after empty_cache
    Range("v0-total-minus-free", "v0", (0, 6, 4), (0, 6, 5),
          "torch allocated peak (weights + activation) + (CUDA total - free - torch allocated) after the "
          "profile run", True, True, _ALLOC_PEAK, "after", False, _BLOCKS_X,
          ("vllm/worker/worker.py@v0.6.4.post1 determine_num_available_blocks ('Memory profiling results')",)),
    # worker.py@v0.6.5 .. @v0.10.2: memory_profiling(baseline at init) -> weights + peak + non-torch increase
    Range("v0-profiler", "v0", (0, 6, 5), (0, 11, 0),
          "weights + torch peak increase + non-torch increase since the worker's start snapshot", False, False,
          _ALLOC_PEAK, "after", False, _BLOCKS_X,
          ("vllm/worker/worker.py@v0.6.5 determine_num_available_blocks (memory_profiling first here)",
           "vllm/worker/worker.py@v0.6.6.post1 determine_num_available_blocks", "vllm/utils.py@v0.6.6.post1 "
           "memory_profiling", "vllm/worker/worker.py@v0.10.2 (the last V0)")),
    # gpu_worker.py@v0.7.0 .. @v0.9.0: peak = allocated peak + (total - free - torch allocated) after empty_cache
    Range("v1-total-minus-free", "v1", (0, 6, 4), (0, 9, 2),
          "torch allocated peak (weights + activation) + (CUDA total - free - torch allocated) after the "
          "profile run", True, True, _ALLOC_PEAK, "after", False, _BLOCKS_X,
          ("vllm/v1/worker/gpu_worker.py@v0.7.0 determine_available_memory",
           "vllm/v1/worker/gpu_worker.py@v0.9.0 determine_available_memory")),
    # gpu_worker.py@v0.9.2: init_snapshot = MemorySnapshot() in init_device, requested_memory = total x util,
    # the 'Free memory on device ... on startup' check, available = requested - non_kv_cache_memory
    Range("v1-profiler", "v1", (0, 9, 2), (0, 18, 0),
          "weights + torch peak increase + non-torch increase since the start snapshot", False, False,
          _ALLOC_PEAK, "after", True, _BLOCKS_X,
          ("vllm/v1/worker/gpu_worker.py@v0.9.2 init_device, determine_available_memory",
           "vllm/utils/__init__.py@v0.9.2 memory_profiling", "vllm/utils/mem_utils.py@v0.12.0 (moved, same)",
           "vllm/v1/worker/gpu_worker.py@v0.17.0 (unchanged)")),
    # gpu_worker.py@v0.18.0: profile_cudagraph_memory(); envs.py@v0.18.0/@v0.19.1 default "0"
    Range("v1-graph-estimate-opt-in", "v1", (0, 18, 0), (0, 20, 0),
          "weights + torch peak increase (read before the graph estimate) + non-torch increase since the start "
          "snapshot", False, False, _ALLOC_PEAK, "flag", True, _BLOCKS_X,
          ("vllm/v1/worker/gpu_worker.py@v0.18.0 determine_available_memory",
           "vllm/envs.py@v0.18.0, @v0.19.1 VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 0",
           "vllm/v1/core/kv_cache_utils.py@v0.19.1 (tokens = blocks // groups x block_size)")),
    # envs.py@v0.20.2 default "1"; kv_cache_utils.py@v0.20.2 num_tokens = int(max_concurrency x max_model_len)
    Range("v1-graph-estimate", "v1", (0, 20, 0), (0, 28, 0),
          "weights + torch peak increase + non-torch increase since the start snapshot + the CUDA-graph "
          "estimate", False, False, _ALLOC_PEAK, "estimated", True, _FROM_CONC,
          ("vllm/v1/worker/gpu_worker.py@v0.20.2 determine_available_memory",
           "vllm/envs.py@v0.20.2 VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1",
           "vllm/v1/core/kv_cache_utils.py@v0.20.2 _report_kv_cache_config", "vllm/config/cache.py@v0.20.2 "
           "gpu_memory_utilization default 0.92", "vllm/v1/worker/gpu_worker.py@v0.24.0 (unchanged)")),
    # mem_utils.py@v0.28.0: non_kv_cache_memory = total_consumed + transient_peak_headroom
    Range("v1-consumed", "v1", (0, 28, 0), None,
          "free memory at the start snapshot - free after the profile run (weights, non-torch, what the "
          "allocator keeps) + transient peak headroom (peak - allocated after the run) + the CUDA-graph "
          "estimate", False, False, "torch peak - torch allocated after the profile run (transient headroom)",
          "estimated", True, _FROM_CONC,
          ("vllm/utils/mem_utils.py@v0.28.0 memory_profiling (total_consumed, transient_peak_headroom)",
           "vllm/v1/worker/gpu_worker.py@v0.28.0, @v0.32.0, @v0.33.0 determine_available_memory")),
)

# Defaults and other switches that changed on their own dates (each with where it was read).
DEFAULT_UTILIZATION_092_FROM: Version = (0, 20, 0)  # vllm/config/cache.py: 0.9 in 0.13.0-0.19.1, 0.92 in 0.20.2
V1_DEFAULT_FROM: Version = (0, 8, 0)  # vllm/envs.py VLLM_USE_V1 default "1" in 0.8.0, "0" in 0.7.3
V0_GONE_FROM: Version = (0, 11, 0)  # vllm/worker/ absent from the 0.11.0 wheel
CONCURRENCY_BY_BLOCKS_FROM: Version = (0, 9, 0)  # kv_cache_utils.py get_max_concurrency_for_kv_cache_config
LARGE_CARD_DEFAULTS_FROM: Version = (0, 8, 5)  # arg_utils.py: >= 70 GiB -> 8192 batched tokens (absent in 0.8.0)
LARGE_CARD_A100_EXCLUDED_FROM: Version = (0, 9, 0)  # arg_utils.py@v0.9.0: `and "a100" not in device_name`
GRAPH_FLAG_FROM: Version = (0, 18, 0)  # envs.py: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS first in 0.18.0
FULL_CUDAGRAPHS_FROM: Version = (0, 11, 0)
KV_CACHE_MEMORY_BYTES_FROM: Version = (0, 10, 2)  # gpu_worker.py@v0.10.2 kv_cache_memory_bytes
AUTO_FIT_FROM: Version = (0, 20, 0)
# where the ledger's figures were measured rather than modelled (benchmarks/gpu_calibrate.py on the H200)
MEASURED: tuple[Version, Version] = ((0, 20, 0), (0, 28, 0))


def v3(version: tuple[int, ...]) -> Version:
    t = tuple(list(version) + [0] * (3 - len(version)))[:3]
    return (t[0], t[1], t[2])


def find(version: tuple[int, ...], engine: str) -> Range:
    """The range of this version and engine (V1 before 0.6.4 or V0 from 0.11 do not exist: the nearest)."""
    v = v3(version)
    same = [r for r in RANGES if r.engine == engine]
    for r in same:
        if r.holds(v):
            return r
    return same[0] if v < same[0].lo else same[-1]


def graphs_subtracted(rng: Range, env: Mapping[str, str] | None = None) -> bool:
    """Whether this range takes the CUDA-graph estimate off the budget, with the env switch (0.18+)."""
    flag = (env or {}).get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")
    if rng.cudagraphs == "after":
        return False
    if flag is not None:
        return str(flag).strip().lower() not in ("0", "", "false")
    return rng.cudagraphs == "estimated"
