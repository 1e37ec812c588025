"""`qwen-tui plan`: print the ledger as a table or as one JSON object.

Exit codes: 0 the plan fits, 1 it does not (a problem of severity "error"), 2 bad input (model not
resolvable, unreadable config.json ...), with a one-line message and no traceback.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from backend.ledger.adapter import LedgerInputError, plan_from_settings
from backend.ledger.checks import gib_text  # one rule for both: small amounts in MiB
from backend.ledger.core import Ledger
from backend.settings import Settings


def probe_gpus() -> list[dict[str, Any]] | None:
    """NVML readings for the plan (backend.gpu.GpuMonitor, the one NVML reader), or None without NVML."""
    from backend.gpu import GpuMonitor  # NVML bindings only when a monitor is made here
    from backend.ledger.adapter import gpus_from_monitor

    mon = GpuMonitor()
    try:
        return gpus_from_monitor(mon)
    except Exception:  # noqa: BLE001 - a driver that fails mid-read: plan from the planner's card
        return None
    finally:
        mon.shutdown()


def detect_vllm_version(settings: Settings) -> str | None:
    """The vLLM version the server's interpreter has (package metadata; no import of vllm)."""
    try:
        # only for the CLI or a real install: plan() stays a pure function
        from backend.server.launch import detect_install, python_for

        return detect_install(python_for(settings)).version
    except Exception:  # the launcher's module missing or failing must not break planning
        return None


def this_box(settings: Settings) -> tuple[list[dict[str, Any]] | None, str | None]:
    """What every plan of this box is made with: the NVML cards (None for the CPU planner or without NVML) and
    the server interpreter's vLLM version (which the learned launches and the version ranges key on)."""
    gpus = probe_gpus() if settings.planner_cfg.device != "cpu" else None
    return gpus, detect_vllm_version(settings)


def cards_reserved(led: Ledger) -> str | None:
    r = [float(c["reserved_gib"]) for c in led.cards if c.get("reserved_gib") is not None]
    return f"{min(r):.2f} GiB" if r else None


def _n(x: int) -> str:
    return f"{x:,}"


def format_table(led: Ledger) -> str:
    d = led.to_dict()
    rows: list[tuple[str, str, str]] = []
    def add(a: str, b: str, c: str = "") -> None:
        rows.append((a, b, c))

    per = "per GPU" if led.device != "cpu" else "(CPU)"
    add("Weights, whole model", gib_text(led.weights_bytes), f"{_n(led.params)} params, {led.dtype}"
        + (f", from {led.weights_source}" if led.weights_source != "config" else ""))
    add(f"Weights {per}", gib_text(led.weights_bytes_per_gpu),
        f"TP {led.tensor_parallel_size}" + (f" x PP {led.pipeline_parallel_size}"
                                            if led.pipeline_parallel_size > 1 else ""))
    add(f"Budget {per}", gib_text(led.budget_bytes_per_gpu),
        f"{led.gpu_memory_utilization:.2f} x {gib_text(led.usable_bytes_per_gpu)} usable"
        + (f" ({cards_reserved(led)} reserved by the driver, NVML)" if cards_reserved(led) else ""))
    if led.learned_correction_bytes:
        add("  - measured on this box", gib_text(led.learned_correction_bytes), "what the model missed at the last "
            "comparable launch")
    add("  - activation peak", gib_text(led.activation_bytes), f"{_n(led.max_num_batched_tokens)} batched tokens"
        + (f", incl. {gib_text(led.compile_bytes)} for torch.compile's first start" if led.compile_bytes else ""))
    if led.device == "cpu":
        add("  - CPU runtime", gib_text(led.cpu_baseline_bytes), "measured on vLLM's CPU build")
        if led.cpu_shm_bytes:
            add("  - shared-memory all-reduce", gib_text(led.cpu_shm_bytes), "every rank maps every rank's buffers")
        if len(led.ranks) > 1:
            for r in led.ranks:  # vLLM's own terms: "Auto set (KV/node) ..., with R requested ... C non-kv"
                add(f"  rank {r['rank']} (node {r['node']})", f"{r['kv_gib']:.2f} GiB",
                    f"KV = {r['requested_gib']:.2f} requested ({led.gpu_memory_utilization:.2f} x "
                    f"{r['node_total_gib']:.2f}) - {r['consumed_gib']:.2f} non-kv")
    else:
        add("  - non-torch memory", gib_text(led.non_torch_bytes),
            "incl. CUDA context" if led.cuda_context_bytes else "NCCL, cuBLAS workspaces")
        if led.cuda_graphs:
            add("  - CUDA graphs", gib_text(led.cuda_graph_bytes) if led.cuda_graphs_subtracted else "(0.00 GiB)",
                f"{led.cuda_graphs} graphs, ~{gib_text(led.cuda_graph_bytes)}"
                + ("" if led.cuda_graphs_subtracted else " on top of the budget"))
        else:
            add("  - CUDA graphs", "0.00 GiB", "enforce_eager")
    def kib(b: float) -> str:
        return f"{b / 1024:.1f} KiB"

    add("KV per token", kib(led.kv_bytes_per_token),
        f"{_n(led.kv_bytes_per_token)} B, all GPUs; {led.kv_cache_dtype}")
    add(f"KV per token {per}", kib(led.kv_bytes_per_token_per_gpu), f"{_n(led.kv_bytes_per_token_per_gpu)} B")
    add(f"KV cache {per}", gib_text(max(0, led.kv_available_bytes_per_gpu)), "what vLLM calls available")
    add("KV cache tokens", _n(led.kv_cache_tokens), f"{_n(led.num_blocks)} blocks x {led.block_size}")
    add("Max concurrency", f"{led.max_concurrency:.2f}x", f"at {_n(led.max_model_len)} tokens per request")
    if led.decode_tokens_per_s_ceiling is not None:
        add("Decode ceiling", f"<= {led.decode_tokens_per_s_ceiling:.1f} tok/s",
            f"batch 1: {led.bandwidth_gbs:g} GB/s / {led.weights_bytes_per_gpu / 1e9:.2f} GB read per token")
    else:
        add("Decode ceiling", "n/a", "CPU device" if led.device == "cpu" else "unknown card bandwidth")
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    cards = d["cards"]
    card_line = (f"{len(cards)} x {cards[0]['name']} ({cards[0]['memory_gib']:.2f} GiB, {cards[0]['source']})"
                 if cards else "no devices")
    head = [f"Memory ledger: {led.model}",
            f"  model shape from {led.model_source}",
            f"  on {card_line}; {led.vllm}",
            f"  max_model_len {_n(led.max_model_len)}, max_num_seqs {led.max_num_seqs}, "
            f"block {led.block_size}, {'eager' if led.enforce_eager else 'CUDA graphs'}"]
    if led.vllm_range and led.device != "cpu":
        r = led.vllm_range
        head.append(f"  vLLM accounting: {r['label']} ({r['id']}, version {r['version']} {r['version_from']}): "
                    f"KV = utilization x CUDA total - {r['terms']['non_kv']}")
    if led.basis:
        head.append(f"  basis: {led.basis.get('family')}, expected within ±{led.basis.get('expected_error_pct'):g} % "
                    f"({led.basis.get('source')})")
        if led.basis.get("kind") == "measured":
            head.append(f"  {led.basis['summary']}; measured: {', '.join(led.basis.get('measured_terms', []))}")
        if "compile_cache" in led.basis and led.device != "cpu":
            head.append(f"  compile cache: {led.basis['compile_cache']}")
    head.append("")
    body = [f"  {a:<{w1}}  {b:>{w2}}  {c}".rstrip() for a, b, c in rows]
    tail = [""]
    if led.problems:
        tail.append("Problems:")
        for p in led.problems:
            tail.append(f"  [{p.severity}] {p.kind}: {p.message}")
            tail.append(f"      fix: {p.fix}")
    else:
        tail.append("Problems: none")
    for n in led.notes:
        tail.append(f"note: {n}")
    tail.append(f"Fits: {'yes' if led.fits else 'NO'}")
    return "\n".join(head + body + tail) + "\n"


def run_plan(settings: Settings, as_json: bool, out: TextIO = sys.stdout,
             gpus: list[dict[str, Any]] | None = None) -> int:
    """Print the ledger for `settings`; 0 fits, 1 does not fit, 2 bad input."""
    try:
        if gpus is None:
            gpus, version = this_box(settings)
        else:
            version = detect_vllm_version(settings)
        ledger = plan_from_settings(settings, gpus=gpus, vllm_version=version)
        if version and ledger.vllm_range:
            ledger.vllm_range["version_from"] = "installed"  # the server interpreter's vLLM package
    except LedgerInputError as e:
        if as_json:
            out.write(json.dumps({"error": str(e)}) + "\n")
        print(f"qwen-tui plan: {e}", file=sys.stderr)
        return 2
    if as_json:
        out.write(json.dumps(ledger.to_dict(), indent=2) + "\n")
    else:
        out.write(format_table(ledger))
    return 0 if ledger.fits else 1
