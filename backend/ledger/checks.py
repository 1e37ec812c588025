"""Checks over a computed ledger: each problem says what vLLM would do and names the setting to change.

Fixes name settings as `server.<key>` (the config.toml [server] keys are vllm serve flags with dashes
turned into underscores). Errors mean vLLM would refuse to start (or run out of memory); warnings
do not make `fits` false.
"""

from __future__ import annotations

import math
from typing import Any

from backend.ledger import cards as card_table
from backend.ledger import cpu_model, overheads
from backend.ledger.shapes import QuantSpec, lookup
from backend.ledger.types import Card, Ledger, PlanContext, Problem, valid_tp_sizes, weights_on_gpu

GiB = overheads.GiB


def gib_text(b: float) -> str:
    """GiB to two places; a small amount (a demo model's weights) in MiB, never "0.00 GiB"."""
    if 0 < abs(b) < GiB / 20:
        return f"{b / (1 << 20):.1f} MiB"
    return f"{b / GiB:.2f} GiB"


def _util_fix(need_bytes: float, usable: int) -> str | None:
    u = math.ceil(need_bytes / usable * 100) / 100
    return f"server.gpu_memory_utilization = {u:.2f}" if u <= 0.95 else None


def _quantized_alternative(ctx: PlanContext, budget_for_weights: int, tp: int) -> str | None:
    if ctx.quant is not None:
        return None
    name = ctx.params.model or ctx.shape.name
    awq_id = None
    base = name.rstrip("/").split("/")[-1]
    if lookup(base) is not None and base.lower().startswith("qwen2.5-") and "-instruct" in base.lower():
        awq_id = f"Qwen/{base.split('-Instruct')[0]}-Instruct-AWQ"
    awq = weights_on_gpu(ctx, tp, QuantSpec("awq", 4, 128))
    fp8 = weights_on_gpu(ctx, tp, QuantSpec("fp8", 8, -1))
    if awq_id and awq <= budget_for_weights:
        return f'server.model = "{awq_id}" (4-bit AWQ, {gib_text(awq)} per GPU)'
    if fp8 <= budget_for_weights:
        return f'server.quantization = "fp8" (8-bit weights, {gib_text(fp8)} per GPU)'
    if awq <= budget_for_weights:
        return f"server.model = a 4-bit AWQ/GPTQ checkpoint of this model ({gib_text(awq)} per GPU)"
    return None


def _check_devices(led: Ledger, ctx: PlanContext, used: list[Card], gpu_count: int) -> None:
    shape, tp, pp = ctx.shape, led.tensor_parallel_size, led.pipeline_parallel_size
    if led.device != "cpu" and tp * pp > gpu_count:
        ok = [d for d in valid_tp_sizes(shape, gpu_count // pp) if d * pp <= gpu_count]
        led.problems.append(Problem(
            "not-enough-gpus", "error",
            f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} needs {tp * pp} GPUs; "
            f"{gpu_count} found",
            f"server.tensor_parallel_size = {ok[-1]}" if ok else "add GPUs"))
    nh, nkv = shape.num_attention_heads, shape.num_kv_heads
    kv_ok = nkv % tp == 0 if tp <= nkv else tp % nkv == 0
    if nh % tp or not kv_ok:
        ok = valid_tp_sizes(shape, max(gpu_count, tp))
        what = (f"Total number of attention heads ({nh}) must be divisible by tensor parallel size ({tp})"
                if nh % tp else
                f"{nkv} KV heads cannot be split evenly over tensor parallel size {tp}")
        led.problems.append(Problem(
            "tp-not-divisible", "error", what + f"; valid sizes: {', '.join(map(str, ok))}",
            f"server.tensor_parallel_size = {max([d for d in ok if d <= max(1, gpu_count)] or [1])}"))


def _check_dtype(led: Ledger, ctx: PlanContext, used: list[Card]) -> None:
    if led.device == "cpu" or led.dtype != "bfloat16":
        return
    for c in used:
        cc = c.cc
        if cc is None:
            spec = card_table.find(c.name)
            cc = spec.cc if spec else None
        if cc is None or tuple(cc) >= (8, 0):
            continue
        explicit = (ctx.params.dtype or "auto").lower() not in ("auto",)
        ccs = f"{cc[0]}.{cc[1]}"
        if explicit or ctx.beh.version < (0, 10, 0):
            led.problems.append(Problem(
                "bf16-unsupported", "error",
                f"Bfloat16 is only supported on GPUs with compute capability of at least 8.0; "
                f"{c.name} has {ccs}",
                'server.dtype = "float16"'))
        else:
            led.problems.append(Problem(
                "bf16-unsupported", "warning",
                f"the model is bfloat16 but {c.name} (compute capability {ccs}) lacks bf16; "
                "vLLM will cast to float16", 'server.dtype = "float16"'))
        return


def _check_lengths(led: Ledger, ctx: PlanContext) -> None:
    derived = ctx.shape.derived_max_model_len
    if ctx.params.max_model_len and ctx.params.max_model_len > derived:
        allowed = str(ctx.params.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "")).strip() in ("1", "true")
        led.problems.append(Problem(
            "max-model-len-exceeds-model", "warning" if allowed else "error",
            f"User-specified max_model_len ({ctx.params.max_model_len}) is greater than the model's "
            f"max_position_embeddings ({ctx.shape.max_position_embeddings}"
            + (f" x rope scaling {ctx.shape.rope_scaling_factor:g}" if ctx.shape.rope_scaling_factor != 1 else "")
            + ")" + (" (allowed by VLLM_ALLOW_LONG_MAX_MODEL_LEN)" if allowed else ""),
            f"server.max_model_len = {derived}"))


def _check_cpu_nodes(led: Ledger, ctx: PlanContext) -> None:
    """vLLM's CPU workers each check their own request against the node's free memory, at the same moment,
    so ranks that share a node pass one by one and then allocate together."""
    world = led.tensor_parallel_size * led.pipeline_parallel_size
    short = cpu_model.numa_autobind_short(ctx.params.env, world) if world > 1 else None
    if short is not None:
        led.problems.append(Problem(
            "numa-autobind", "error",
            f"VLLM_CPU_OMP_THREADS_BIND=auto binds one NUMA node per rank: {world} ranks, {short} node(s) here",
            "server.env.VLLM_CPU_OMP_THREADS_BIND = '0|1' (one CPU list per rank, '|' between ranks)"))
    by_node: dict[int, list[dict[str, Any]]] = {}
    for r in led.ranks:
        by_node.setdefault(r["node"], []).append(r)
    for node, ranks in by_node.items():
        avail = ranks[0].get("node_available_gib")
        asked = sum(r["requested_gib"] for r in ranks)
        if len(ranks) > 1 and avail is not None and asked > avail and not ctx.params.kv_cache_memory_bytes:
            led.problems.append(Problem(
                "cpu-node-overcommitted", "warning",
                f"{len(ranks)} ranks on NUMA node {node} each take {led.gpu_memory_utilization:.2f} of it: "
                f"{asked:.2f} GiB together, {avail:.2f} GiB available (each rank checks only its own share)",
                f"server.gpu_memory_utilization = {max(0.05, led.gpu_memory_utilization * avail / asked - 0.01):.2f}"))


def _check_memory(led: Ledger, ctx: PlanContext, used: list[Card], gpu_count: int) -> None:
    cpu = led.device == "cpu"
    usable, requested = led.usable_bytes_per_gpu, led.budget_bytes_per_gpu
    tp = led.tensor_parallel_size
    over = ctx.overhead_no_weights
    need_one = math.ceil(led.max_model_len / led.block_size) * led.block_size * led.kv_bytes_per_token_per_gpu
    where = "CPU memory" if cpu else "per GPU"

    # free memory at start (vLLM's own pre-check), when the caller knows it
    for c in used:
        if c.memory_free_bytes is not None and not ctx.params.kv_cache_memory_bytes:
            if c.memory_free_bytes < requested:
                u = math.floor(c.memory_free_bytes / usable * 100 - 1) / 100
                # only V1 >= 0.9.2 refuses at start (versions.py startup_check); older ones start and may
                # run out of memory when the KV cache is allocated
                strict = cpu or ctx.beh.range.startup_check
                led.problems.append(Problem(
                    "free-memory-too-low", "error" if strict else "warning",
                    f"Free memory on {c.name} ({gib_text(c.memory_free_bytes)}) is less than "
                    f"{led.gpu_memory_utilization:.2f} x {gib_text(usable)} = {gib_text(requested)} that vLLM asks for"
                    + (" (other processes hold memory)" if not cpu else ""),
                    f"server.gpu_memory_utilization = {max(u, 0.05):.2f}, or stop what holds the memory"))
                break

    if cpu:
        _check_cpu_nodes(led, ctx)

    if not cpu and not ctx.params.kv_cache_memory_bytes and all(c.memory_free_bytes is None for c in used):
        # vLLM (V1 0.9.2+) creates the CUDA context, then refuses to start when the free memory is
        # below utilization x total; older versions start and run out of memory later.
        context = int(overheads.CUDA_CONTEXT_GIB * GiB)
        if requested > usable - context:
            u = math.floor((usable - context) / usable * 100) / 100
            strict = ctx.beh.engine == "v1" and ctx.beh.version >= (0, 9, 2)
            led.problems.append(Problem(
                "utilization-too-high", "error" if strict else "warning",
                f"{led.gpu_memory_utilization:.2f} x {gib_text(usable)} = {gib_text(requested)} is more than is "
                f"free once the CUDA context (~{gib_text(context)}) exists",
                f"server.gpu_memory_utilization = {u:.2f}"))

    if ctx.params.kv_cache_memory_bytes:
        total = led.weights_bytes_per_gpu + over + led.kv_available_bytes_per_gpu
        if total > usable:
            led.problems.append(Problem(
                "kv-cache-memory-bytes-too-large", "error",
                f"weights {gib_text(led.weights_bytes_per_gpu)} + overheads {gib_text(over)} + KV "
                f"{gib_text(led.kv_available_bytes_per_gpu)} exceed {gib_text(usable)} {where}",
                f"server.kv_cache_memory_bytes = "
                f"{max(0, usable - led.weights_bytes_per_gpu - over) // (1 << 20) << 20}"))
            return
    elif led.weights_bytes_per_gpu + over > requested:
        fixes = []
        if not cpu:
            limit = max(gpu_count, tp)
            for d in valid_tp_sizes(ctx.shape, limit):
                if d > tp and d * led.pipeline_parallel_size <= limit:
                    w = weights_on_gpu(ctx, d)
                    if w + over + need_one <= requested:
                        fixes.append(f"server.tensor_parallel_size = {d} ({gib_text(w)} per GPU)")
                        break
        alt = _quantized_alternative(ctx, requested - over - need_one, tp)
        if alt:
            fixes.append(alt)
        uf = _util_fix(led.weights_bytes_per_gpu + over + need_one, usable)
        if uf:
            fixes.append(uf)
        led.problems.append(Problem(
            "weights-exceed-budget", "error",
            f"weights need {gib_text(led.weights_bytes_per_gpu)} {where} but {led.gpu_memory_utilization:.2f} x "
            f"{gib_text(usable)} = {gib_text(requested)} minus {gib_text(over)} of overheads leaves "
            f"{gib_text(requested - over)}",
            "; or ".join(fixes) or "a larger or second GPU"))
        return

    if led.num_blocks == 0 and not ctx.params.kv_cache_memory_bytes:
        uf = _util_fix(led.weights_bytes_per_gpu + over + need_one, usable)
        led.problems.append(Problem(
            "no-kv-cache-memory", "error",
            f"No available memory for the cache blocks: {gib_text(max(0, led.kv_available_bytes_per_gpu))} "
            f"left {where}",
            uf or "server.tensor_parallel_size larger, or a quantized model"))
        return

    if led.kv_available_bytes_per_gpu < need_one:
        fixes = []
        if led.max_model_len_that_fits > 0:
            fixes.append(f"server.max_model_len = {led.max_model_len_that_fits}")
        if led.kv_cache_dtype in ("bfloat16", "float16"):
            fixes.append('server.kv_cache_dtype = "fp8" (halves KV per token)')
        uf = _util_fix(led.weights_bytes_per_gpu + over + need_one, usable)
        if uf:
            fixes.append(uf)
        led.problems.append(Problem(
            "kv-cache-too-small-for-max-model-len", "error",
            f"To serve at least one request with max_model_len {led.max_model_len}, "
            f"{gib_text(need_one)} KV cache is needed {where}, more than the available "
            f"{gib_text(led.kv_available_bytes_per_gpu)}; the largest max_model_len that fits is "
            f"{led.max_model_len_that_fits}",
            "; or ".join(fixes)))
        return

    if led.max_num_seqs > led.max_concurrency:
        holds = math.floor(led.max_concurrency)
        led.problems.append(Problem(
            "max-num-seqs-exceeds-cache", "warning",
            f"max_num_seqs {led.max_num_seqs} full-length ({led.max_model_len}-token) sequences need "
            f"{led.max_num_seqs * need_one / GiB:.2f} GiB of KV {where}; the cache holds "
            f"{led.max_concurrency:.2f} of them (shorter requests share it; beyond that vLLM preempts)",
            f"server.max_num_seqs = {max(1, holds)}, or a smaller server.max_model_len"))

    if not cpu and led.cuda_graph_bytes and not led.cuda_graphs_subtracted:
        top = requested + led.cuda_graph_bytes + int(overheads.CUDA_CONTEXT_GIB * GiB)
        if top > usable:
            u = math.floor((usable - led.cuda_graph_bytes - overheads.CUDA_CONTEXT_GIB * GiB) / usable * 100) / 100
            led.problems.append(Problem(
                "cuda-graphs-may-not-fit", "warning",
                f"{led.cuda_graphs} CUDA graphs (~{gib_text(led.cuda_graph_bytes)}) are captured on top of "
                f"the {led.gpu_memory_utilization:.2f} budget and the CUDA context; that exceeds "
                f"{gib_text(usable)}: capture may run out of memory",
                f"server.gpu_memory_utilization = {u:.2f}, or server.enforce_eager = true"))


def _check_weights_files(led: Ledger, ctx: PlanContext) -> None:
    st = ctx.shape.safetensors
    bad = getattr(st, "bad_files", None)
    if bad:
        led.problems.append(Problem(
            "weights-incomplete", "error",
            f"{len(bad)} weight file(s) are unreadable or shorter than their header says "
            f"(interrupted download?): {', '.join(b.rsplit('/', 1)[-1] for b in bad[:3])}",
            "download the model again (server.model / server.download_dir)"))


def run_checks(led: Ledger, ctx: PlanContext, used: list[Card], gpu_count: int) -> None:
    _check_devices(led, ctx, used, gpu_count)
    _check_lengths(led, ctx)
    _check_dtype(led, ctx, used)
    _check_weights_files(led, ctx)
    _check_memory(led, ctx, used, gpu_count)
    order = {"error": 0, "warning": 1}
    led.problems.sort(key=lambda pr: order.get(pr.severity, 2))
