"""The ledger's records, shared by core.plan (which builds them) and checks (which add problems to
them): the devices, the parameters, a problem, the ledger itself, and one plan's intermediate figures.
A module of their own, so that core and checks import each other's types from neither."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from backend.ledger import overheads
from backend.ledger.shapes import ModelShape, QuantSpec, weight_parts, weights_per_gpu

GiB = overheads.GiB


@dataclass(frozen=True)
class Card:
    """One device. memory_total_bytes is the board memory NVML reports (CPU: the node's memory)."""

    name: str
    memory_total_bytes: int
    cc: tuple[int, int] | None = None
    memory_free_bytes: int | None = None
    source: str = "nvml"  # nvml | planner | cpu
    memory_reserved_bytes: int | None = None  # NVML memory info v2: what the driver keeps back
    numa_node: int | None = None  # CPU: the memory node this rank allocates on
    threads: int | None = None  # CPU: the OpenMP threads this rank is bound to


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
    # what this box's last comparable launch showed the model missed (backend/ledger/learned.py): taken off
    # each rank's KV cache, as non-KV memory the model does not know about
    kv_correction_bytes: int = 0
    auto_max_model_len: bool = False  # max_model_len = "auto": vLLM fits it to the KV cache (>= 0.20)


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
    cpu_shm_bytes: int = 0  # CPU TP/PP: the shared-memory all-reduce buffers each rank maps
    ranks: list[dict[str, Any]] = field(default_factory=list)  # per rank: vLLM's own terms, as modelled
    device_model: dict[str, Any] = field(default_factory=dict)  # which of vLLM's accountings was used
    learned_correction_bytes: int = 0  # of the overheads: what a measured launch on this box added
    max_model_len_auto: bool = False  # max_model_len is what vLLM's auto-fit will pick
    vllm_range: dict[str, Any] = field(default_factory=dict)  # versions.RANGES: the accounting this plan followed

    @property
    def fits(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    @property
    def overhead_bytes(self) -> int:
        return (self.activation_bytes + self.non_torch_bytes
                + (self.cuda_graph_bytes if self.cuda_graphs_subtracted else 0) + self.cpu_baseline_bytes
                + self.cpu_shm_bytes + self.learned_correction_bytes)

    def to_dict(self) -> dict[str, Any]:
        def g(b: float) -> float:
            return round(b / GiB, 3)

        return {
            "model": self.model, "model_source": self.model_source,
            "weights_source": self.weights_source, "device": self.device, "vllm": self.vllm,
            "vllm_version": self.vllm_version, "vllm_version_assumed": self.vllm_version_assumed,
            "dtype": self.dtype, "kv_cache_dtype": self.kv_cache_dtype,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len, "max_model_len_auto": self.max_model_len_auto,
            "max_num_seqs": self.max_num_seqs,
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
                "cpu_runtime": g(self.cpu_baseline_bytes), "cpu_shm": g(self.cpu_shm_bytes),
                "measured_on_this_box": g(self.learned_correction_bytes),
                "total": g(self.overhead_bytes)},
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
            "ranks": [dict(r) for r in self.ranks],
            "device_model": dict(self.device_model),
            "vllm_range": dict(self.vllm_range),
        }



def valid_tp_sizes(shape: ModelShape, limit: int) -> list[int]:
    """TP sizes vLLM accepts for this model: heads divide, KV heads divide or are replicated evenly."""
    out = []
    for d in range(1, max(1, limit) + 1):
        kv_ok = shape.num_kv_heads % d == 0 if d <= shape.num_kv_heads else d % shape.num_kv_heads == 0
        if shape.num_attention_heads % d == 0 and kv_ok:
            out.append(d)
    return out



@dataclass
class PlanContext:
    """Intermediate figures of one plan that its checks need (core.plan builds it, checks read it)."""

    shape: ModelShape
    params: PlanParams
    beh: overheads.Behaviour
    dtype: str
    quant: QuantSpec | None
    util: float
    usable: int
    layers_stage: int
    overhead_no_weights: int  # activation + non-torch (+ graphs when subtracted) (+ cpu baseline)


def weights_on_gpu(ctx: PlanContext, tp: int, quant: QuantSpec | None = None) -> int:
    """Weight bytes on one GPU at this TP size (and quantization), less what cpu_offload_gb moves off."""
    shape = ctx.shape if quant is None else replace(ctx.shape, safetensors=None)
    parts = weight_parts(shape, ctx.dtype, quant or ctx.quant)
    w, _ = weights_per_gpu(shape, parts, tp, ctx.params.pipeline_parallel_size)
    return max(0, w - int((ctx.params.cpu_offload_gb or 0) * GiB))
