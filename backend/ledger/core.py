"""The ledger itself: a pure function from plain values to figures and problems.

`plan(shape, params, cards)` never touches files, NVML or settings; backend.ledger.adapter builds its
arguments from a Settings object. The overhead models and the vLLM version behaviours are
documented in backend.ledger.overheads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from backend.ledger import cards as card_table
from backend.ledger import overheads as ov
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

GiB = ov.GiB


@dataclass(frozen=True)
class Card:
    """One device. memory_total_bytes is the board memory NVML reports (CPU: the node's memory)."""

    name: str
    memory_total_bytes: int
    cc: tuple[int, int] | None = None
    memory_free_bytes: int | None = None
    source: str = "nvml"  # nvml | planner | cpu
    memory_reserved_bytes: int | None = None  # NVML memory info v2: what the driver keeps back


@dataclass
class PlanParams:
    """The [server] settings that matter, as vllm serve takes them (None = vLLM's default)."""

    model: str = ""
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    enforce_eager: bool | None = None
    quantization: str | None = None
    cpu_offload_gb: float | None = None
    device: str = "cuda"
    vllm_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    gpu_count: int | None = None  # devices in the box (fix suggestions); default len(cards)
    # "cold": the first start after a change (torch.compile builds its cache; V1 >= 0.20 needs more
    # memory then, see overheads); "warm": the cache exists. Plan the cold case: that start fails.
    compile_cache: str = "cold"


@dataclass
class Problem:
    kind: str
    severity: str  # "error" | "warning"
    message: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "severity": self.severity, "message": self.message, "fix": self.fix}


@dataclass
class Ledger:
    model: str
    model_source: str
    weights_source: str
    device: str
    vllm: str
    vllm_version: str
    vllm_version_assumed: bool
    dtype: str
    kv_cache_dtype: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    enforce_eager: bool
    cards: list[dict[str, Any]]
    params: int
    weights_bytes: int
    weights_bytes_per_gpu: int
    usable_bytes_per_gpu: int
    budget_bytes_per_gpu: int
    activation_bytes: int
    compile_bytes: int  # of activation_bytes: what a cold torch.compile adds (V1 >= 0.20)
    non_torch_bytes: int
    cuda_context_bytes: int
    cuda_graph_bytes: int
    cuda_graphs: int
    cuda_graphs_subtracted: bool
    cpu_baseline_bytes: int
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: int
    kv_bytes_per_token_model: int
    kv_available_bytes_per_gpu: int
    num_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    max_model_len_that_fits: int
    bandwidth_gbs: float | None
    decode_tokens_per_s_ceiling: float | None
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    basis: dict[str, Any] = field(default_factory=dict)  # what is measured, what modelled, expected error

    @property
    def fits(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    @property
    def overhead_bytes(self) -> int:
        return (self.activation_bytes + self.non_torch_bytes
                + (self.cuda_graph_bytes if self.cuda_graphs_subtracted else 0) + self.cpu_baseline_bytes)

    def to_dict(self) -> dict[str, Any]:
        g = lambda b: round(b / GiB, 3)  # noqa: E731
        return {
            "model": self.model, "model_source": self.model_source,
            "weights_source": self.weights_source, "device": self.device, "vllm": self.vllm,
            "vllm_version": self.vllm_version, "vllm_version_assumed": self.vllm_version_assumed,
            "dtype": self.dtype, "kv_cache_dtype": self.kv_cache_dtype,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len, "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens, "block_size": self.block_size,
            "enforce_eager": self.enforce_eager, "cards": self.cards,
            "params": self.params,
            "weights_bytes": self.weights_bytes,
            "weights_gib": g(self.weights_bytes),
            "weights_gib_per_gpu": g(self.weights_bytes_per_gpu),
            "usable_gib_per_gpu": g(self.usable_bytes_per_gpu),
            "budget_gib_per_gpu": g(self.budget_bytes_per_gpu),
            "overheads_gib_per_gpu": {
                "activation_peak": g(self.activation_bytes), "non_torch": g(self.non_torch_bytes),
                "torch_compile_cold": g(self.compile_bytes),
                "cuda_context_counted": g(self.cuda_context_bytes),
                "cuda_graphs": g(self.cuda_graph_bytes), "cuda_graphs_count": self.cuda_graphs,
                "cuda_graphs_subtracted": self.cuda_graphs_subtracted,
                "cpu_runtime": g(self.cpu_baseline_bytes), "total": g(self.overhead_bytes)},
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "kv_bytes_per_token_model": self.kv_bytes_per_token_model,
            "kv_cache_gib_per_gpu": g(max(0, self.kv_available_bytes_per_gpu)),
            "kv_cache_blocks": self.num_blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "max_model_len_that_fits": self.max_model_len_that_fits,
            "bandwidth_gbs": self.bandwidth_gbs,
            "decode_tokens_per_s_ceiling": (None if self.decode_tokens_per_s_ceiling is None
                                            else round(self.decode_tokens_per_s_ceiling, 1)),
            "fits": self.fits,
            "problems": [p.to_dict() for p in self.problems],
            "notes": list(self.notes),
            "basis": dict(self.basis),
        }


# -- helpers -------------------------------------------------------------------------------------
def valid_tp_sizes(shape: ModelShape, limit: int) -> list[int]:
    """TP sizes vLLM accepts for this model: heads divide, KV heads divide or are replicated evenly."""
    out = []
    for d in range(1, max(1, limit) + 1):
        kv_ok = shape.num_kv_heads % d == 0 if d <= shape.num_kv_heads else d % shape.num_kv_heads == 0
        if shape.num_attention_heads % d == 0 and kv_ok:
            out.append(d)
    return out


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
    beh = ov.behaviour(vllm_version)
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


def _fmt_gib(b: float) -> str:
    return f"{b / GiB:.2f} GiB"


@dataclass
class _Ctx:
    """Intermediate figures the checks need."""

    shape: ModelShape
    params: PlanParams
    beh: ov.Behaviour
    dtype: str
    quant: QuantSpec | None
    util: float
    usable: int
    layers_stage: int
    overhead_no_weights: int  # activation + non-torch (+ graphs when subtracted) (+ cpu baseline)


def _weights_gpu(ctx: _Ctx, tp: int, quant: QuantSpec | None = None) -> int:
    shape = ctx.shape if quant is None else replace(ctx.shape, safetensors=None)
    parts = weight_parts(shape, ctx.dtype, quant or ctx.quant)
    w, _ = weights_per_gpu(shape, parts, tp, ctx.params.pipeline_parallel_size)
    return max(0, w - int((ctx.params.cpu_offload_gb or 0) * GiB))


def _basis(beh: ov.Behaviour, cpu: bool, world: int, used: list[Card]) -> dict[str, Any]:
    """Which figures of this plan are measured and which modelled, and the error to expect."""
    exact = ["KV bytes per token (2 x layers x KV heads x head_dim x dtype)", "weights (parameter count x dtype)"]
    reserved_note: list[str] = []
    if any(c.memory_reserved_bytes is not None for c in used):
        exact.append("usable memory (NVML total less its reserved share)")
    elif not cpu:
        # what drivers keep back differs by board (0.42 GiB on an RTX 3090 and an H100, 0.60 on an
        # H200, 0.57 in a pasted MoE log); without NVML's reading the ledger assumes 0.42
        reserved_note = [f"the driver's reserved memory ({ov.DRIVER_RESERVED_GIB} GiB assumed; 0.4-0.6 GiB seen, "
                         "read from NVML when the card is)"]
    if cpu:
        return {"family": "vLLM CPU build", "exact": exact, "measured": ["CPU runtime baseline (one run)"],
                "modelled": ["activation peak"], "expected_error_pct": 5.0,
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


# -- the plan ------------------------------------------------------------------------------------
def plan(shape: ModelShape, params: PlanParams, cards: list[Card]) -> Ledger:
    p = params
    beh = ov.behaviour(p.vllm_version, p.env)
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
    smallest = min(used, key=lambda c: ov.usable_memory(c.memory_total_bytes, c.memory_reserved_bytes))
    board = smallest.memory_total_bytes
    usable = board if cpu else ov.usable_memory(board, smallest.memory_reserved_bytes)
    specs = [card_table.find(c.name) for c in used]
    bandwidths = [s.bandwidth_gbs for s in specs if s]
    bandwidth = None if cpu or len(bandwidths) < len(used) else min(bandwidths)

    # settings with vLLM's defaults
    util = p.gpu_memory_utilization if p.gpu_memory_utilization is not None else beh.default_utilization
    derived = shape.derived_max_model_len
    max_len = p.max_model_len or derived
    block = p.block_size or (ov.CPU_BLOCK_SIZE if cpu else 16)
    board_gib = board / GiB
    name0 = used[0].name
    seqs = p.max_num_seqs or ov.default_max_num_seqs(beh, board_gib, name0, p.device)
    batched = p.max_num_batched_tokens or ov.default_max_num_batched_tokens(
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
    act, forward, _ = ov.activation_bytes(
        hidden=shape.hidden_size, intermediate=shape.intermediate_size, vocab=shape.vocab_size,
        tp=tp, dtype_size=dtype_bytes(dtype), tokens=batched, num_seqs=min(seqs, batched),
        engine=beh.engine, experts_per_tok=shape.num_experts_per_tok if shape.num_experts else 0,
        moe_intermediate=shape.moe_intermediate_size, experts=shape.num_experts,
        shared_intermediate=shape.shared_expert_intermediate_size,
        q_out=shape.num_attention_heads // tp * shape.head_dim,
        kv_out=kv_heads_per_gpu(shape.num_kv_heads, tp) * shape.head_dim, qk_norm=shape.qk_norm)
    if beh.engine == "v0" and world > 1 and not cpu:
        # only the driver worker samples; vLLM sizes all caches by the smallest (the driver's)
        driver = min(seqs, batched) * shape.vocab_size * 4 * ov.V0_DRIVER_SAMPLER_COPIES
        if driver > act:
            notes.append(f"V0 with {world} workers: the driver worker (rank 0) also runs the sampler warm-up "
                         f"(+{(driver - act) / GiB:.2f} GiB); vLLM sizes every worker's KV cache by it")
            act = driver
    compile_extra = 0
    if beh.measured_v1 and not eager and p.compile_cache != "warm" and not cpu:
        embed = -(-shape.vocab_size // tp) * shape.hidden_size * dtype_bytes(dtype)
        compile_extra = max(0, ov.cold_compile_bytes(embed, forward) - act)
        act += compile_extra
    if cpu:
        non_torch = context = 0
        graphs, n_graphs, graphs_sub = 0, 0, False
        baseline = int(ov.CPU_BASELINE_GIB * GiB)
    else:
        non_torch, context = ov.non_torch_bytes(beh, world)
        graphs, n_graphs = ov.cuda_graph_bytes(beh, layers_stage, seqs, batched, eager)
        graphs_sub = beh.cudagraphs_subtracted and n_graphs > 0
        baseline = 0
    overhead = act + non_torch + (graphs if graphs_sub else 0) + baseline
    requested = int(util * usable)
    if p.kv_cache_memory_bytes:
        kv_avail = int(p.kv_cache_memory_bytes)
    else:
        kv_avail = requested - w_gpu - overhead

    # blocks, tokens, concurrency
    block_bytes = block * kv_tok_gpu
    blocks = max(0, kv_avail // block_bytes) if kv_avail > 0 else 0
    if beh.concurrency_by_blocks:
        conc = blocks / math.ceil(max_len / block)
    else:
        conc = blocks * block / max_len
    tokens = int(conc * max_len) if beh.tokens_from_concurrency else blocks * block
    fits_len = min(blocks * block, derived)

    ctx = _Ctx(shape, p, beh, dtype, quant, util, usable, layers_stage, overhead)
    ledger = Ledger(
        model=p.model or shape.name, model_source=shape.source, weights_source=parts.source,
        device=p.device, vllm=beh.label, vllm_version=".".join(map(str, beh.version)),
        vllm_version_assumed=beh.assumed, dtype=dtype,
        kv_cache_dtype=dtype if kv_dtype == "auto" else kv_dtype,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, gpu_memory_utilization=util,
        max_model_len=max_len, max_num_seqs=seqs, max_num_batched_tokens=batched, block_size=block,
        enforce_eager=eager,
        cards=[{"name": c.name, "memory_gib": round(c.memory_total_bytes / GiB, 2),
                "usable_gib": round((c.memory_total_bytes if cpu else ov.usable_memory(
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
        problems=problems, notes=notes)
    ledger.basis = _basis(beh, cpu, world, used)
    if bandwidth is None and not cpu:
        notes.append(f"no memory bandwidth known for {name0!r}: no decode ceiling")
    if compile_extra:
        notes.append(f"planned for the first start after a change (torch.compile builds its cache: "
                     f"+{compile_extra / GiB:.2f} GiB at its peak); later starts get that much more KV cache")
    if shape.num_experts:
        notes.append("MoE model: the fused-MoE workspaces are modelled from vLLM's kernels and checked on two "
                     "MoE shapes on one GPU; expert parallelism is not modelled")

    from backend.ledger.checks import run_checks

    run_checks(ledger, ctx, used, gpu_count)
    return ledger
