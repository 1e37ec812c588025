"""The ledger itself: a pure function from plain values to figures and problems.

`plan(shape, params, cards)` never touches files, NVML or settings; backend.ledger.adapter builds its
arguments from a Settings object. The overhead models and the vLLM version behaviours are
documented in backend.ledger.overheads.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from backend.ledger import cards as card_table
from backend.ledger import cpu_model, overheads
from backend.ledger.checks import run_checks
from backend.ledger.shapes import (
    ModelShape,
    QuantSpec,
    canonical_dtype,
    dtype_bytes,
    kv_heads_per_gpu,
    stage_layers,
    weight_parts,
    weights_per_gpu,
)
from backend.ledger.types import Card, Ledger, PlanContext, PlanParams, Problem, valid_tp_sizes

__all__ = ["Card", "Ledger", "PlanParams", "Problem", "valid_tp_sizes"]  # their home is types.py

GiB = overheads.GiB


# -- helpers -------------------------------------------------------------------------------------
def kv_bytes_per_token(shape: ModelShape, kv_dtype_size: int, tp: int = 1,
                       layers: int | None = None) -> int:
    """2 (K and V) x layers x KV heads on one GPU x head_dim x dtype bytes."""
    layers = shape.num_layers if layers is None else layers
    return 2 * layers * kv_heads_per_gpu(shape.num_kv_heads, tp) * shape.head_dim * kv_dtype_size


def max_concurrency(blocks: int, block_size: int, max_model_len: int,
                    vllm_version: str | None = None) -> float:
    """Full-length requests the cache holds, as the given vLLM version computes and prints it.

    V0 and V1 before 0.9: blocks x block_size / max_model_len. V1 0.9+: blocks / ceil(max_model_len /
    block_size) (get_max_concurrency_for_kv_cache_config, one full-attention group).
    """
    beh = overheads.behaviour(vllm_version)
    if beh.concurrency_by_blocks:
        return blocks / math.ceil(max_model_len / block_size)
    return blocks * block_size / max_model_len


def resolve_dtype(shape: ModelShape, dtype: str | None, quant: QuantSpec | None) -> str:
    d = canonical_dtype(dtype)
    if d in (None, "auto"):
        if quant and quant.method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
            return "float16"
        d = shape.torch_dtype
        if d == "float32":  # vLLM serves float32 checkpoints in 16 bits under "auto"
            return "bfloat16"
    return d if d in ("float16", "bfloat16", "float32") else "bfloat16"


def _basis(beh: overheads.Behaviour, cpu: bool, world: int, used: list[Card]) -> dict[str, Any]:
    """Which figures of this plan are measured and which modelled, and the error to expect."""
    exact = ["KV bytes per token (2 x layers x KV heads x head_dim x dtype)", "weights (parameter count x dtype)"]
    reserved_note: list[str] = []
    if any(c.memory_reserved_bytes is not None for c in used):
        exact.append("usable memory (NVML total less its reserved share)")
    elif not cpu:
        # what drivers keep back differs by board (0.42 GiB on an RTX 3090 and an H100, 0.60 on an
        # H200, 0.57 in a pasted MoE log); without NVML's reading the ledger assumes 0.42
        reserved_note = [f"the driver's reserved memory ({overheads.DRIVER_RESERVED_GIB} GiB assumed; "
                         "0.4-0.6 GiB seen, read from NVML when the card is)"]
    if cpu:
        return {"family": "vLLM CPU build", "exact": exact + ["each rank's request (utilization x its NUMA node)"],
                "measured": ["CPU runtime baseline (0.66 GiB; 0.67-0.70 seen at TP 1 and 2)"],
                "modelled": ["activation peak", "shared-memory all-reduce buffers (TP/PP > 1)"],
                "expected_error_pct": 2.0,
                "source": "tests/fixtures/vllm-logs/v0.32.0-cpu-*"}
    if beh.measured_v1:
        untested = ["tensor parallel (NCCL buffers estimated)"] if world > 1 else []
        return {"family": "vLLM V1 >= 0.20 on CUDA", "exact": exact,
                "measured": ["runtime overhead 0.27 GiB", "first-start torch.compile peak",
                             "CUDA-graph estimate", "forward activation per batched token"],
                "modelled": ["the embedding shard per GPU"] + untested + reserved_note,
                "expected_error_pct": 2.0 if world == 1 else 5.0,
                "source": "20 runs of vLLM 0.20.2 on an H200, two dense and two MoE shapes "
                          "(tests/fixtures/gpu/calibration/, benchmarks/bench_ledger_truth.py: worst 1.5 %)",
                "not_measured": ["other GPU kinds", "expert parallelism"] + untested}
    return {"family": f"vLLM {'.'.join(map(str, beh.version))} ({beh.engine.upper()})", "exact": exact,
            "measured": ["activation peak (V0 profiling lines of 3090 logs)"] if beh.engine == "v0" else [],
            "modelled": ["non-torch memory", "CUDA graphs", "sampler"] + reserved_note, "expected_error_pct": 10.0,
            "source": "real logs of older versions in tests/fixtures/vllm-logs/ (estimates where none)"}


def device_model(beh: overheads.Behaviour, cpu: bool, tp: int, pp: int, env: dict[str, str],
                 explicit_kv: bool) -> dict[str, Any]:
    """Which of vLLM's accountings this plan followed, and where it was read."""
    if cpu:
        return {
            "name": "vllm-cpu-worker", "source": cpu_model.SOURCE,
            "kv_per_rank": ("kv_cache_memory_bytes (or VLLM_CPU_KVCACHE_SPACE) as given" if explicit_kv else
                            "ceil(utilization x the rank's NUMA-node MemTotal) - the worker's resident memory"),
            "ranks": tp * pp, "binding": env.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
            "split": "every rank asks for the full fraction of its node; the engine keeps the smallest "
                     "rank's blocks"}
    rng = ("V1 >= 0.20 (measured family)" if beh.measured_v1 else
           f"{beh.engine.upper()} {'.'.join(map(str, beh.version))}") + f"; {beh.range.label} ({beh.range_id})"
    return {
        "name": "vllm-gpu-worker", "source": ("vllm/v1/worker/gpu_worker.py" if beh.engine == "v1"
                                              else "vllm/worker/worker.py"),
        "range": rng, "version_rules": version_rules(beh),
        "kv_per_rank": "utilization x CUDA total - weights shard - activation peak - non-torch"
        + (" - CUDA graphs" if beh.cudagraphs_subtracted else ""),
        "ranks": tp * pp, "split": f"weights and KV heads / TP {tp}, layers / PP {pp}; the engine keeps the "
                                   "smallest rank's blocks"}


def vllm_range(beh: overheads.Behaviour, cpu: bool, given: str | None) -> dict[str, Any]:
    """The version range of vLLM's KV accounting this plan used (versions.RANGES), and where the version came
    from ("given": the caller's, e.g. the installed vLLM or a log's; else the newest read, assumed)."""
    out = beh.range.to_dict()
    out["version"] = ".".join(map(str, beh.version))
    out["version_from"] = "given" if given and not beh.assumed else f"assumed (newest read, {out['version']})"
    out["cuda_graphs_subtracted"] = beh.cudagraphs_subtracted
    out["figures"] = ("measured on vLLM 0.20.2 (H200 calibration)" if beh.measured_v1 and not cpu
                      else "modelled from the source (no calibration run of this range)")
    if cpu:
        out["note"] = "the CPU build follows vllm/v1/worker/cpu_worker.py (device_model), not this range"
    return out


def version_rules(beh: overheads.Behaviour) -> list[str]:
    """The accounting rules this vLLM version falls under, each with the range it holds for (overheads.py)."""
    on = {True: "", False: "not "}
    return [
        f"engine {beh.engine.upper()} (V1 from 0.8; VLLM_USE_V1 before 0.11)",
        f"CUDA context {on[beh.context_counted]}counted in non-torch memory (V0 0.6.4, V1 < 0.9.2 count it)",
        f"CUDA graphs {on[beh.cudagraphs_subtracted]}estimated and subtracted before the KV cache (V1 >= 0.20)",
        f"default utilization {beh.default_utilization:g} (0.92 from 0.20)",
        f"concurrency {'by blocks' if beh.concurrency_by_blocks else 'by tokens'} (by blocks from V1 0.9)",
        f"KV tokens {'from the concurrency' if beh.tokens_from_concurrency else 'as blocks x block size'} "
        "(from the concurrency from 0.20)",
        f"large-card defaults {on[beh.large_gpu_defaults]}applied (V1 >= 0.8.5; A100s left out from 0.9)",
        "auto-fit max_model_len " + ("holds back the null block (>= 0.32)" if beh.version >= (0, 32, 0) else
                                     "uses every block (0.20-0.31)" if beh.version >= (0, 20, 0) else
                                     "not available (< 0.20)"),
    ]


# -- the plan ------------------------------------------------------------------------------------
def plan(shape: ModelShape, params: PlanParams, cards: list[Card]) -> Ledger:
    p = params
    beh = overheads.behaviour(p.vllm_version, p.env)
    cpu = p.device == "cpu"
    tp, pp = max(1, p.tensor_parallel_size), max(1, p.pipeline_parallel_size or 1)
    world = tp * pp
    problems: list[Problem] = []
    notes: list[str] = []

    quant = shape.quant
    q = (p.quantization or "").lower()
    if q and quant is None and (q.startswith("fp8") or q in ("bitsandbytes", "bnb")):
        quant = QuantSpec("fp8", 8, -1) if q.startswith("fp8") else QuantSpec("bitsandbytes", 4, 64)
        shape = replace(shape, safetensors=None)  # weights are quantized at load: count from config
    dtype = resolve_dtype(shape, p.dtype, quant)
    kv_dtype = canonical_dtype(p.kv_cache_dtype) or "auto"
    kv_size = dtype_bytes(dtype) if kv_dtype == "auto" else dtype_bytes(kv_dtype)

    # devices
    devs = list(cards)
    if not devs:
        devs = [Card("unknown GPU", int(24 * GiB), source="planner")]
        notes.append("no GPU information: assumed one 24 GiB card")
    gpu_count = p.gpu_count or len(devs)
    used = devs[:world] if len(devs) >= world else devs + [devs[-1]] * (world - len(devs))
    smallest = min(used, key=lambda c: overheads.usable_memory(c.memory_total_bytes, c.memory_reserved_bytes))
    board = smallest.memory_total_bytes
    usable = board if cpu else overheads.usable_memory(board, smallest.memory_reserved_bytes)
    specs = [card_table.find(c.name) for c in used]
    bandwidths = [s.bandwidth_gbs for s in specs if s]
    bandwidth = None if cpu or len(bandwidths) < len(used) else min(bandwidths)

    # settings with vLLM's defaults
    util = p.gpu_memory_utilization if p.gpu_memory_utilization is not None else beh.default_utilization
    derived = shape.derived_max_model_len
    max_len = p.max_model_len or derived
    block = p.block_size or (overheads.CPU_BLOCK_SIZE if cpu else 16)
    board_gib = board / GiB
    name0 = used[0].name
    seqs = p.max_num_seqs or overheads.default_max_num_seqs(beh, board_gib, name0, p.device)
    batched = p.max_num_batched_tokens or overheads.default_max_num_batched_tokens(
        beh, max_len, board_gib, name0, p.device)
    eager = bool(p.enforce_eager) or cpu

    # weights
    parts = weight_parts(shape, dtype, quant)
    w_gpu, w_stages = weights_per_gpu(shape, parts, tp, pp)
    offload = int((p.cpu_offload_gb or 0) * GiB)
    w_gpu = max(0, w_gpu - offload)

    # KV per token
    layers_stage = max(stage_layers(shape.num_layers, pp))
    kv_tok_gpu = kv_bytes_per_token(shape, kv_size, tp, layers_stage)
    kv_tok_all = kv_bytes_per_token(shape, kv_size, tp) * tp
    kv_tok_model = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * kv_size

    # overheads
    act, forward, _ = overheads.activation_bytes(
        hidden=shape.hidden_size, intermediate=shape.intermediate_size, vocab=shape.vocab_size,
        tp=tp, dtype_size=dtype_bytes(dtype), tokens=batched, num_seqs=min(seqs, batched),
        engine=beh.engine, experts_per_tok=shape.num_experts_per_tok if shape.num_experts else 0,
        moe_intermediate=shape.moe_intermediate_size, experts=shape.num_experts,
        shared_intermediate=shape.shared_expert_intermediate_size,
        q_out=shape.num_attention_heads // tp * shape.head_dim,
        kv_out=kv_heads_per_gpu(shape.num_kv_heads, tp) * shape.head_dim, qk_norm=shape.qk_norm)
    if beh.engine == "v0" and world > 1 and not cpu:
        # only the driver worker samples; vLLM sizes all caches by the smallest (the driver's)
        driver = min(seqs, batched) * shape.vocab_size * 4 * overheads.V0_DRIVER_SAMPLER_COPIES
        if driver > act:
            notes.append(f"V0 with {world} workers: the driver worker (rank 0) also runs the sampler warm-up "
                         f"(+{(driver - act) / GiB:.2f} GiB); vLLM sizes every worker's KV cache by it")
            act = driver
    compile_extra = 0
    if beh.measured_v1 and not eager and p.compile_cache != "warm" and not cpu:
        embed = -(-shape.vocab_size // tp) * shape.hidden_size * dtype_bytes(dtype)
        compile_extra = max(0, overheads.cold_compile_bytes(embed, forward) - act)
        act += compile_extra
    if cpu:
        non_torch = context = 0
        graphs, n_graphs, graphs_sub = 0, 0, False
        baseline = int(overheads.CPU_BASELINE_GIB * GiB)
    else:
        non_torch, context = overheads.non_torch_bytes(beh, world)
        if beh.range.other_processes_counted and smallest.memory_free_bytes is not None:
            # total - free after profiling holds what other processes use (versions.py: this range)
            others = max(0, usable - int(smallest.memory_free_bytes))
            if others:
                non_torch += others
                notes.append(f"{beh.range.label} counts what other processes hold on the GPU as its own "
                             f"non-torch memory: {others / GiB:.2f} GiB in use now")
        graphs, n_graphs = overheads.cuda_graph_bytes(beh, layers_stage, seqs, batched, eager)
        graphs_sub = beh.cudagraphs_subtracted and n_graphs > 0
        baseline = 0
    explicit_kv = p.kv_cache_memory_bytes
    if cpu and not explicit_kv and str(p.env.get("VLLM_CPU_KVCACHE_SPACE", "")).strip().isdigit():
        explicit_kv = int(p.env["VLLM_CPU_KVCACHE_SPACE"]) * GiB  # vLLM's CPU platform reads it as GiB
    ranks: list[cpu_model.RankPlan] = []
    shm = 0
    corr = 0 if explicit_kv else int(p.kv_correction_bytes or 0)
    if cpu:
        ranks = cpu_model.plan_ranks(
            util, [(c.numa_node or 0, c.memory_total_bytes, c.memory_free_bytes) for c in used],
            [c.threads or 1 for c in used], weights=w_gpu, activation=act, runtime=baseline, tp=tp, pp=pp,
            explicit_kv=explicit_kv, correction=corr)
        shm = ranks[0].shm_bytes
    overhead = act + non_torch + (graphs if graphs_sub else 0) + baseline + shm + corr
    requested = min(r.requested_bytes for r in ranks) if ranks else int(util * usable)
    if ranks:
        kv_avail = min(r.kv_bytes for r in ranks)  # the engine gives every rank the smallest's blocks
    elif explicit_kv:
        kv_avail = int(explicit_kv)
    else:
        kv_avail = requested - w_gpu - overhead

    # blocks, tokens, concurrency
    block_bytes = block * kv_tok_gpu
    blocks = max(0, kv_avail // block_bytes) if kv_avail > 0 else 0
    if p.auto_max_model_len and blocks:
        # vLLM's auto-fit (kv_cache_utils.py): the longest length whose blocks fit, up to the model's own;
        # 0.32 first holds back the block pool's null block (0.20.2 does not)
        usable_blocks = blocks - (1 if beh.version >= (0, 32, 0) else 0)
        max_len = max(1, min(derived, usable_blocks * block))
    if beh.concurrency_by_blocks:
        conc = blocks / math.ceil(max_len / block)
    else:
        conc = blocks * block / max_len
    tokens = int(conc * max_len) if beh.tokens_from_concurrency else blocks * block
    fits_len = min(blocks * block, derived)

    ctx = PlanContext(shape, p, beh, dtype, quant, util, usable, layers_stage, overhead)
    ledger = Ledger(
        model=p.model or shape.name, model_source=shape.source, weights_source=parts.source,
        device=p.device, vllm=beh.label, vllm_version=".".join(map(str, beh.version)),
        vllm_version_assumed=beh.assumed, dtype=dtype,
        kv_cache_dtype=dtype if kv_dtype == "auto" else kv_dtype,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, gpu_memory_utilization=util,
        max_model_len=max_len, max_num_seqs=seqs, max_num_batched_tokens=batched, block_size=block,
        enforce_eager=eager,
        cards=[{"name": c.name, "memory_gib": round(c.memory_total_bytes / GiB, 2),
                "usable_gib": round((c.memory_total_bytes if cpu else overheads.usable_memory(
                    c.memory_total_bytes, c.memory_reserved_bytes)) / GiB, 2),
                "reserved_gib": (None if c.memory_reserved_bytes is None
                                 else round(c.memory_reserved_bytes / GiB, 3)),
                "cc": list(c.cc or (s.cc if s else ())) or None,
                "bandwidth_gbs": s.bandwidth_gbs if s else None, "source": c.source}
               for c, s in zip(used, specs, strict=False)],
        params=parts.params, weights_bytes=parts.total, weights_bytes_per_gpu=w_gpu,
        usable_bytes_per_gpu=usable, budget_bytes_per_gpu=requested, activation_bytes=act,
        compile_bytes=compile_extra,
        non_torch_bytes=non_torch, cuda_context_bytes=context, cuda_graph_bytes=graphs,
        cuda_graphs=n_graphs, cuda_graphs_subtracted=graphs_sub, cpu_baseline_bytes=baseline,
        kv_bytes_per_token=kv_tok_all, kv_bytes_per_token_per_gpu=kv_tok_gpu,
        kv_bytes_per_token_model=kv_tok_model, kv_available_bytes_per_gpu=kv_avail,
        num_blocks=blocks, kv_cache_tokens=tokens, max_concurrency=conc,
        max_model_len_that_fits=fits_len, bandwidth_gbs=bandwidth,
        decode_tokens_per_s_ceiling=(bandwidth * 1e9 / sum(w_stages) if bandwidth and w_gpu else None),
        problems=problems, notes=notes, cpu_shm_bytes=shm, ranks=[r.to_dict() for r in ranks],
        learned_correction_bytes=corr, max_model_len_auto=bool(p.auto_max_model_len))
    ledger.basis = _basis(beh, cpu, world, used)
    ledger.device_model = device_model(beh, cpu, tp, pp, p.env, bool(explicit_kv))
    ledger.vllm_range = vllm_range(beh, cpu, p.vllm_version)
    if bandwidth is None and not cpu:
        notes.append(f"no memory bandwidth known for {name0!r}: no decode ceiling")
    if p.auto_max_model_len and not blocks:
        notes.append("max_model_len = \"auto\": vLLM cannot fit any length (no memory for the KV cache) and "
                     "refuses to start")
    elif p.auto_max_model_len:
        notes.append(f"max_model_len = \"auto\": vLLM will pick {max_len:,} "
                     + ("(the model's own)" if max_len == derived else f"(what the KV cache holds; the model's is "
                                                                      f"{derived:,})"))
    if compile_extra:
        notes.append(f"planned for the first start after a change (torch.compile builds its cache: "
                     f"+{compile_extra / GiB:.2f} GiB at its peak); later starts get that much more KV cache")
    if shape.num_experts:
        notes.append("MoE model: the fused-MoE workspaces are modelled from vLLM's kernels and checked on two "
                     "MoE shapes on one GPU; expert parallelism is not modelled")

    run_checks(ledger, ctx, used, gpu_count)
    return ledger
