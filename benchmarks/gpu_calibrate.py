"""Calibration runs for the memory ledger: real vLLM on a GPU over a grid of settings.

    source /tmp/w/env.sh && python3 benchmarks/gpu_calibrate.py "$OUT" [--only NAME,...] [--cold-first]

For each grid point: the ledger's plan (``plan --json``), then ``serve --detach --wait`` through the
supervisor to READY (or the failure), NVML's memory info v2 (total, reserved) before the start and
the peak used while it ran, then ``stop``. Each run's server log is written to
OUT/<name>.log with a ``#`` header that states everything needed to plan it again
(``# qwen-tui-settings: {json}``, ``# nvml: {json}``) and what vLLM printed; OUT/calibration.json
holds the plan beside vLLM's figures for every run. tests/test_ledger_gpu_runs.py plans from each
header and must land within 5 %. --cold-first empties vLLM's torch.compile cache before the first run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CLI = [sys.executable, "-m", "backend.cli"]

QWEN7B = "/tmp/w/model/Qwen2.5-7B-shape"
QWEN7B_CONFIG = {  # Qwen2.5-7B-Instruct's config.json shape
    "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "max_window_layers": 28, "tie_word_embeddings": False,
}


# Two MoE shapes (issue 10, class 9: the activation peak of the fused-MoE kernels), same tokenizer.
QWEN3MOE = "/tmp/w/model/Qwen3-30B-A3B-shape"
QWEN3MOE_CONFIG = {  # Qwen3-30B-A3B's config.json shape: 128 experts, 8 per token, no shared expert
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "max_position_embeddings": 40960, "max_window_layers": 48,
    "tie_word_embeddings": False, "attention_bias": False, "rms_norm_eps": 1e-6,
}
QWEN2MOE = "/tmp/w/model/Qwen1.5-MoE-A2.7B-shape"
QWEN2MOE_CONFIG = {  # Qwen1.5-MoE-A2.7B's config.json shape: 60 experts, 4 per token, a shared expert
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048,
    "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 60,
    "num_experts_per_tok": 4, "norm_topk_prob": False, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "max_position_embeddings": 8192, "max_window_layers": 21,
    "tie_word_embeddings": False,
}
SHAPES = {QWEN7B: QWEN7B_CONFIG, QWEN3MOE: QWEN3MOE_CONFIG, QWEN2MOE: QWEN2MOE_CONFIG}
BASE = Path("/tmp/w/model/Qwen2.5-14B-Instruct")


def make_shape(dst_name: str, base: Path = BASE) -> None:
    """The 14B-shape folder that ../shared/gpu/install.sh writes, with another config.json shape."""
    dst = Path(dst_name)
    if dst.exists() or not base.exists():
        return
    shutil.copytree(base, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(SHAPES[dst_name])
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))


def model_of(sets: list[str]) -> str:
    for s in sets:
        if s.startswith("server.model="):
            return s.split("=", 1)[1]
    return str(BASE)


def model_label(path: str) -> str:
    return {QWEN7B: "Qwen2.5-7B-Instruct", QWEN3MOE: "Qwen3-30B-A3B", QWEN2MOE: "Qwen1.5-MoE-A2.7B"}.get(
        path, "Qwen2.5-14B-Instruct")


# name -> --set overrides on top of the config (Qwen2.5-14B's shape, TP=1, max_model_len 8192, 16 seqs)
GRID: dict[str, list[str]] = {
    "u025": ["server.gpu_memory_utilization=0.25"],
    "u025-eager": ["server.gpu_memory_utilization=0.25", "server.enforce_eager=true"],
    "u025-fp8kv": ["server.gpu_memory_utilization=0.25", "server.kv_cache_dtype=fp8"],
    "u025-mnbt2048-seqs64": ["server.gpu_memory_utilization=0.25", "server.max_num_batched_tokens=2048",
                             "server.max_num_seqs=64"],
    "u050-len32k": ["server.gpu_memory_utilization=0.50", "server.max_model_len=32768"],
    "u095-seqs128": ["server.gpu_memory_utilization=0.95", "server.max_num_seqs=128"],
    # another shape (Qwen2.5-7B's config, same tokenizer): what is per model and what is per runtime.
    # Each twice: the first start compiles (cold), the second loads the compile cache (warm).
    "7b-u020-cold": [f"server.model={QWEN7B}", "server.gpu_memory_utilization=0.20"],
    "7b-u020-warm": [f"server.model={QWEN7B}", "server.gpu_memory_utilization=0.20"],
    "7b-u020-mnbt2048-cold": [f"server.model={QWEN7B}", "server.gpu_memory_utilization=0.20",
                              "server.max_num_batched_tokens=2048"],
    "7b-u020-mnbt2048-warm": [f"server.model={QWEN7B}", "server.gpu_memory_utilization=0.20",
                              "server.max_num_batched_tokens=2048"],
    "7b-u020-mnbt2048-eager": [f"server.model={QWEN7B}", "server.gpu_memory_utilization=0.20",
                               "server.max_num_batched_tokens=2048", "server.enforce_eager=true"],
    # MoE: eager at two batch sizes (the forward activation's slope), then cold and warm compiles.
    "q2moe-u030-eager": [f"server.model={QWEN2MOE}", "server.gpu_memory_utilization=0.30",
                         "server.enforce_eager=true"],
    "q2moe-u030-eager-mnbt2048": [f"server.model={QWEN2MOE}", "server.gpu_memory_utilization=0.30",
                                  "server.enforce_eager=true", "server.max_num_batched_tokens=2048"],
    "q2moe-u030-cold": [f"server.model={QWEN2MOE}", "server.gpu_memory_utilization=0.30"],
    "q2moe-u030-warm": [f"server.model={QWEN2MOE}", "server.gpu_memory_utilization=0.30"],
    "q3moe-u060-eager": [f"server.model={QWEN3MOE}", "server.gpu_memory_utilization=0.60",
                         "server.enforce_eager=true"],
    "q3moe-u060-eager-mnbt2048": [f"server.model={QWEN3MOE}", "server.gpu_memory_utilization=0.60",
                                  "server.enforce_eager=true", "server.max_num_batched_tokens=2048"],
    "q3moe-u060-cold": [f"server.model={QWEN3MOE}", "server.gpu_memory_utilization=0.60"],
    "q3moe-u060-warm": [f"server.model={QWEN3MOE}", "server.gpu_memory_utilization=0.60"],
    "q3moe-u048-seqs64": [f"server.model={QWEN3MOE}", "server.gpu_memory_utilization=0.48",
                          "server.max_num_seqs=64"],
}


def model_config(path: str) -> str:
    """The run's config.json on one line (the replay plans from it: tests/test_ledger_gpu_runs.py)."""
    try:
        return json.dumps(json.loads((Path(path) / "config.json").read_text()), sort_keys=True)
    except (OSError, ValueError):
        return "{}"


def nvml_memory() -> dict:
    from backend.gpu import GpuMonitor

    mon = GpuMonitor()
    try:
        if not mon.available():
            return {"error": mon.reason}
        s = mon.sample()[0]
        return {"name": mon.gpus[0].name, "total_bytes": s.memory_total_bytes,
                "reserved_bytes": getattr(s, "memory_reserved_bytes", None), "used_bytes": s.memory_used_bytes}
    finally:
        mon.shutdown()


def cli_json(*args: str, timeout: float = 420) -> tuple[int, dict, str]:
    p = subprocess.run([*CLI, *args, "--json"], capture_output=True, text=True, timeout=timeout)
    out = p.stdout
    try:
        data = json.loads(out[out.index("{"):]) if "{" in out else {}
    except ValueError:
        data = {}
    return p.returncode, data, p.stderr[-2000:]


def one(name: str, sets: list[str], out: Path) -> dict:
    setv = [a for s in sets for a in ("--set", s)]
    t0 = time.time()
    nv = nvml_memory()
    _, plan, _ = cli_json(*setv, "plan")
    rc, served, err = cli_json(*setv, "serve", "--detach", "--wait", "360")
    ready_s = round(time.time() - t0, 1)
    peak = nvml_memory()
    from backend.server import client as supervisor_client
    from backend.server import statefile

    st = supervisor_client.status()
    log_path = st.get("log_path")
    settings = (statefile.read() or {}).get("settings")
    subprocess.run([*CLI, "stop"], capture_output=True, text=True, timeout=120)
    rec = {"name": name, "set": sets, "serve_rc": rc, "state": served.get("state"), "ready_s": ready_s,
           "nvml_before": nv, "nvml_ready": peak,
           "vllm": {k: served.get(k) for k in ("vllm_version", "kv_cache_tokens", "kv_cache_gib", "max_concurrency",
                                               "weights_gib", "failure")},
           "plan": {k: plan.get(k) for k in ("fits", "kv_cache_tokens", "kv_cache_gib", "max_concurrency",
                                             "overheads_gib_per_gpu", "usable_gib_per_gpu", "budget_gib_per_gpu")},
           "serve_stderr": err[-800:]}
    if log_path and Path(log_path).exists():
        header = [f"# source: qwen-tui benchmarks/gpu_calibrate.py run {name!r}, {time.strftime('%Y-%m-%d')}, "
                  f"vLLM {served.get('vllm_version')} (CUDA build) on {nv.get('name')}, under qwen-tui serve",
                  f"# model: {model_label(model_of(sets))}'s exact shape "
                  "with random weights (--load-format dummy); TP 1",
                  f"# model-config: {model_config(model_of(sets))}",
                  f"# qwen-tui-settings: {json.dumps((settings or {}).get('server'), sort_keys=True)}",
                  f"# nvml: {json.dumps(nv, sort_keys=True)}",
                  f"# extract: kv_cache_tokens {served.get('kv_cache_tokens')}; max_concurrency "
                  f"{served.get('max_concurrency')}; state {served.get('state')}",
                  f"# outcome: {served.get('state')}" + (f", {served['failure'].get('kind')}"
                                                        if served.get("failure") else "")]
        body = Path(log_path).read_text(errors="replace")
        (out / f"{name}.log").write_text("\n".join(header) + "\n" + body)
    return rec


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "/tmp/calib")
    out.mkdir(parents=True, exist_ok=True)
    names = list(GRID)
    if "--only" in argv:
        names = argv[argv.index("--only") + 1].split(",")
    if "--cold-first" in argv:
        shutil.rmtree(Path.home() / ".cache" / "vllm" / "torch_compile_cache", ignore_errors=True)
    for model in {model_of(GRID[n]) for n in names}:
        if model in SHAPES:
            make_shape(model)
    results = []
    for name in names:
        rec = one(name, GRID[name], out)
        results.append(rec)
        (out / "calibration.json").write_text(json.dumps(results, indent=1, default=str))
        v, p = rec["vllm"], rec["plan"]
        err = (100 * (p["kv_cache_tokens"] - v["kv_cache_tokens"]) / v["kv_cache_tokens"]
               if p.get("kv_cache_tokens") and v.get("kv_cache_tokens") else None)
        print(f"{name}: {rec['state']} in {rec['ready_s']} s; KV tokens vLLM {v.get('kv_cache_tokens')} plan "
              f"{p.get('kv_cache_tokens')} ({'?' if err is None else f'{err:+.1f} %'})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
