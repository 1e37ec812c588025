"""The ledger against every real vLLM log in tests/fixtures/vllm-logs/.

Each log is either predicted from what its `#` header states (model, GPU memory, settings, version)
and compared with what vLLM printed (KV tokens and max concurrency within 5%), or skipped with the
reason it cannot be predicted. `pytest -s` prints the error of each. A second test checks the
version's concurrency formula on every log that printed a block/token count next to a concurrency.

Numbers in EXPECT are copied from the headers' `# extract:` lines.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.ledger import Card, PlanParams, lookup, max_concurrency, plan
from backend.ledger.shapes import ModelShape
from tests.helpers import FIXTURES

GiB = 1 << 30
LOGS = FIXTURES / "vllm-logs"
TOL_PCT = 5.0

RTX3090 = Card("NVIDIA GeForce RTX 3090", int(24 * GiB), cc=(8, 6), source="planner")
# The demo-style model of the v0.32.0-cpu-* logs: hidden 256, 2 layers, 2 heads, 1 KV head,
# head_dim 128 (header). intermediate 512 and the vocabulary (a few hundred tokens) are not in the
# header; at ~3 MB of weights they change the prediction by < 0.01%.
TINY_QWEN2 = ModelShape(name="tiny-qwen2", num_layers=2, hidden_size=256, num_attention_heads=2,
                        num_kv_heads=1, head_dim=128, intermediate_size=512, vocab_size=1024,
                        max_position_embeddings=4096, tie_word_embeddings=True, qkv_bias=True,
                        source="test: fixture header")

# case id -> (log file, shape, params, cards, expected {kv_cache_tokens, max_concurrency, fits})
PREDICT = {
    "v0.6.4-3090-llama3.1-8b@20000": (
        "v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log", lookup("meta-llama/Llama-3.1-8B-Instruct"),
        PlanParams(model="meta-llama/Llama-3.1-8B-Instruct", gpu_memory_utilization=0.90,
                   max_model_len=20000, vllm_version="0.6.4"),
        [RTX3090], {"kv_cache_tokens": 1952 * 16, "max_concurrency": 1.56, "fits": True}),
    "v0.6.4-3090-llama3.1-8b@29000": (
        "v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log", lookup("meta-llama/Llama-3.1-8B-Instruct"),
        PlanParams(model="meta-llama/Llama-3.1-8B-Instruct", gpu_memory_utilization=0.90,
                   max_model_len=29000, vllm_version="0.6.4"),
        [RTX3090], {"kv_cache_tokens": 23648, "max_concurrency": 0.82, "fits": False}),
    "v0.32.0-cpu-tiny-qwen2-ready": (
        "v0.32.0-cpu-tiny-qwen2-ready.log", TINY_QWEN2,
        PlanParams(model="tiny-qwen2", dtype="bfloat16", max_model_len=2048,
                   gpu_memory_utilization=0.2, device="cpu", vllm_version="0.32.0"),
        [Card("CPU node 0", int(9.59 * GiB), source="cpu")],
        {"kv_cache_tokens": 1_309_184, "max_concurrency": 639.25, "fits": True}),
    # TP=2, one core per rank; the node memory vLLM read at worker start is requested / utilization (header)
    "v0.32.0-cpu-tp2-ledger-b": (
        "v0.32.0-cpu-tp2-ledger-b.log", TINY_QWEN2,
        PlanParams(model="tiny-qwen2", dtype="bfloat16", max_model_len=2048, max_num_seqs=8,
                   gpu_memory_utilization=0.2, tensor_parallel_size=2, device="cpu", vllm_version="0.32.0",
                   env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"}),
        [Card("CPU node 0", int(2.12 / 0.2 * GiB), source="cpu", numa_node=0, threads=1)] * 2,
        {"kv_cache_tokens": 1_502_720, "max_concurrency": 733.75, "fits": True}),
    "v0.32.0-cpu-tp2-ledger-a": (
        "v0.32.0-cpu-tp2-ledger-a.log", TINY_QWEN2,
        PlanParams(model="tiny-qwen2", dtype="bfloat16", max_model_len=2048, max_num_seqs=8,
                   gpu_memory_utilization=0.2, tensor_parallel_size=2, device="cpu", vllm_version="0.32.0",
                   env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"}),
        [Card("CPU node 0", int(1.72 / 0.2 * GiB), source="cpu", numa_node=0, threads=1)] * 2,
        {"kv_cache_tokens": 1_068_416, "max_concurrency": 521.69, "fits": True}),
}

# The H200 of the v0.20.2 logs: 143,771 MiB board, 616 MiB reserved by the driver (header)
H200 = Card("NVIDIA H200", 143_771 * 2**20, cc=(9, 0), memory_reserved_bytes=616 * 2**20, source="nvml")
Q14_H200 = PlanParams(model="Qwen/Qwen2.5-14B-Instruct", dtype="bfloat16", gpu_memory_utilization=0.90,
                      max_model_len=8192, max_num_seqs=16, vllm_version="0.20.2")
PREDICT.update({
    # "torch.compile first run" in the header: a cold start, which the ledger plans by default
    "v0.20.2-h200-qwen2.5-14b@0.90": (
        "v0.20.2-h200-qwen2.5-14b-shape-tp1-util0.90-ready.log", lookup("Qwen/Qwen2.5-14B-Instruct"),
        Q14_H200, [H200], {"kv_cache_tokens": 525_984, "max_concurrency": 64.21, "fits": True}),
})

# Logs whose header does not give enough to predict KV tokens / concurrency.
SKIP = {
    "nccl-shm-too-small-canonical-texts.log": "not a vLLM startup log (NCCL/PyTorch error texts)",
    "v0.10.2-fp8kv-kv-ok-and-maxlen-fail-summary.log":
        "GPU, model and TP not stated (only the concurrency arithmetic is checked, below)",
    "v0.10.2dev-qwen2.5-0.5b-tp2-v1-startup-head.log": "startup head only: no KV lines, GPU not stated",
    "v0.11.0-h100-gpt-oss-120b-tp1-kv-insufficient-fail.log":
        "gpt-oss is a sliding-window/full hybrid with MXFP4 experts; the ledger models full attention "
        "and dense/AWQ/GPTQ/FP8 weights only",
    "v0.11.0-v1-qwen2.5-omni-enginecore-oom-line.log": "OOM line only; GPU shared with other processes",
    "v0.15.2rc1-5070ti+5090d-qwen3-coder-30b-pp2-kv-insufficient-fail.log":
        "pipeline parallel over two different GPUs, and the issue is a vLLM bug in exactly that sizing",
    "v0.19dev-qwen3.5-gguf-tp1-kv-cudagraph-estimate.log":
        "hybrid (linear attention) GGUF model, GPU not stated",
    "v0.2.2-qwen-7b-import-libcudart-fail.log": "import failure, no memory figures",
    "v0.32.0-cpu-tp2-numa-autobind-fail.log": "fails at the thread binding, before any memory figure",
    "v0.32.0-cpu-tp2-ready-then-worker-killed.log": "no prediction yet for the CPU build at TP=2 (issue 25's ledger)",
    "v0.20.x-worker_tp0-model-loading-compile-head.log": "model and GPU not stated; no KV lines",
    "v0.32.0-cpu-bad-argument.log": "argument error, no memory figures",
    "v0.32.0-cpu-max-len-exceeds-model.log":
        "config-level failure (checked by test_ledger_core max-model-len test), no memory figures",
    "v0.32.0-cpu-model-not-found.log": "model not found, no memory figures",
    "v0.32.0-cpu-tiny-qwen2-cpu-memory.log":
        "fails the start-up free-memory check before KV sizing (checked in test_ledger_core)",
    "v0.32.0-cpu-weights-incomplete.log": "weight load failure, no KV figures",
    "v0.3x-v1-intel-arc-kv-insufficient-models-typo-fixed.log": "Intel XPU, model not stated",
    "v0.4.2-wsl-ray-yi-34b-awq-tp2-startup-head.log": "startup head only: no KV lines, GPU not stated",
    "v0.4.x-ray-tp-custom-allreduce-nccl-fail.log": "NCCL failure, model/GPU not in excerpt",
    "v0.4.x-torch2.1-2080ti22g-qwen2-7b-fp32-oom.log":
        "OOM during profiling (fp32 weights on a modified 22 GB card); no KV lines",
    "v0.5.3.post1-qwen2-7b-tp2-mp-startup-head.log": "startup head only: no KV lines, GPU not stated",
    "v0.5.4-v100-glm4-9b-libcudart-warning-startup.log":
        "startup head only (the bf16-on-V100 failure is checked in test_ledger_core)",
    "v0.5.x-wsl-weights1.96g-oom-after-load-fail.log": "model and GPU not stated; OOM before KV sizing",
    "v0.6.0-2x3090-nvlink-llama3.1-8b-gptq-tp2-startup-head.log":
        "startup head only: no KV lines (marlin GPTQ, --num-scheduler-steps 8)",
    "v0.6.1-v0-load-model-oom-traceback.log": "OOM traceback, model/GPU not in excerpt",
    "v0.6.4-qwen2-vl-72b-tp1-startup-head-oom.log": "engine config head only; GPU not stated",
    "v0.6.4.post1-4090-qwen2.5-7b-fp8-dynamic-tp1-profile-oom-fail.log":
        "OOM inside the profiling forward pass (no KV figures printed)",
    "v0.6.x-2x3090-qwen2-vl-72b-awq-tp2-safetensors-header-fail.log": "corrupt shard, no KV figures",
    "v0.6.x-ci-uvicorn-port-in-use-debug.log": "port failure, no memory figures",
    "v0.6.x-internal-port-eaddrinuse-fail.log": "port failure, no memory figures",
    "v0.6.x-v0-mq-internvl2.5-78b-safetensors-load-fail.log": "corrupt shard, no KV figures",
    "v0.7.x-v0-qwen2.5-32b-multigpu-vllmworkerprocess-cudagraph.log":
        "GPU, TP and utilization not stated (concurrency line only)",
    "v0.7.x-v1-llama3.1-70b-w8a8-tp1-kv-gpu-blocks.log":
        "GPU not stated (concurrency arithmetic checked below)",
    "v0.8.1-v1-deepseek-r1-distill-qwen-7b-tp-allgather-fail.log": "collective failure before KV sizing",
    "v0.8.5-v1-qwen2.5-vl-class-load-oom-lmhead.log": "OOM during model construction, GPU not stated",
    "v0.8.5-v1-weights18g-enginecore-failed-kvinit.log": "model and GPU not stated; no KV lines",
    "v0.8.x-ray-multinode-worker-oom-prefix-ip.log": "multi-node Ray OOM during forward, no KV figures",
    "v0.8.5dev-2xrtx5090-qwq-32b-bnb-pp2-kv-maxlen-fail.log":
        "unsloth dynamic bnb-4bit checkpoint (mixed 4-bit and 16-bit modules, size not in the log) "
        "split by pipeline parallel: weights per stage cannot be derived from the header",
    "v0.9.0-rtx4060ti8g-qwen2.5-0.5b-tp1-kv-partial.log":
        "gpu-memory-utilization not stated (two instances share the card)",
    "v0.9.x-v1-engine-core-init-failed-final-line.log": "final wrapper line only",
    "v0.20.2-h200-qwen2.5-14b-shape-tp1-util0.17-no-cache-memory-fail.log":
        "no KV cache at all (-5.03 GiB available): test_h200_util_0_17_does_not_fit checks the plan says so",
}


def test_h200_util_0_17_does_not_fit() -> None:
    led = plan(lookup("Qwen/Qwen2.5-14B-Instruct"), replace(Q14_H200, gpu_memory_utilization=0.17), [H200])
    assert not led.fits and led.kv_cache_tokens == 0
    # vLLM printed "Available KV cache memory: -5.03 GiB"; that run found the compile cache of the
    # 0.90 run before it (warm), the default plan is for a cold start (0.71 GiB more for this shape)
    warm = plan(lookup("Qwen/Qwen2.5-14B-Instruct"),
                replace(Q14_H200, gpu_memory_utilization=0.17, compile_cache="warm"), [H200])
    assert warm.kv_available_bytes_per_gpu / GiB == pytest.approx(-5.03, abs=0.05)
    assert led.kv_available_bytes_per_gpu < warm.kv_available_bytes_per_gpu

LOG_FILES = sorted(p.name for p in LOGS.glob("*.log"))


def _cases():
    by_file: dict[str, list[str]] = {}
    for case, entry in PREDICT.items():
        by_file.setdefault(entry[0], []).append(case)
    for name in LOG_FILES:
        for case in by_file.get(name, []):
            yield pytest.param(name, case, id=case)
        if name not in by_file:
            yield pytest.param(name, None, id=name)


def _err(pred: float, act: float) -> float:
    return (pred - act) / act * 100.0


@pytest.mark.parametrize("log_name,case", list(_cases()))
def test_prediction_against_log(log_name: str, case: str | None) -> None:
    if case is None:
        pytest.skip(SKIP.get(log_name, "no prediction entry for this log yet"))
    _, shape, params, cards, want = PREDICT[case]
    assert shape is not None
    led = plan(shape, params, cards)
    errs = {}
    for key in ("kv_cache_tokens", "max_concurrency"):
        got = led.max_concurrency if key == "max_concurrency" else led.kv_cache_tokens
        errs[key] = _err(got, want[key])
        shown = f"{got:.4f}" if key == "max_concurrency" else f"{got:,}"
        print(f"\n[ledger] {case}: {key} predicted {shown} vLLM {want[key]:,} error {errs[key]:+.2f}%",
              end="")
    assert led.fits is want["fits"], [p.to_dict() for p in led.problems]
    for key, e in errs.items():
        assert abs(e) <= TOL_PCT, f"{case}: {key} off by {e:+.2f}%"


def test_every_log_is_predicted_or_has_a_reason() -> None:
    predicted = {entry[0] for entry in PREDICT.values()}
    missing = [n for n in LOG_FILES if n not in predicted and n not in SKIP]
    assert not missing, f"new fixture logs without a prediction or a skip reason: {missing}"


# (log, vLLM version, blocks, block_size, max_model_len, printed concurrency)
CONCURRENCY = [
    ("v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log", "0.6.4", 1952, 16, 20000, 1.56),
    ("v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log", "0.6.4", 1478, 16, 29000, 0.82),
    ("v0.7.x-v1-llama3.1-70b-w8a8-tp1-kv-gpu-blocks.log", "0.7.0", 1381, 16, 2048, 10.79),
    ("v0.10.2-fp8kv-kv-ok-and-maxlen-fail-summary.log", "0.10.2", 230528 // 16, 16, 100000, 2.31),
    ("v0.32.0-cpu-tiny-qwen2-ready.log", "0.32.0", 1_309_184 // 16, 16, 2048, 639.25),
]


@pytest.mark.parametrize("log_name,version,blocks,block,max_len,printed", CONCURRENCY,
                         ids=[f"{c[0]}@{c[4]}" for c in CONCURRENCY])
def test_concurrency_formula_matches_log(log_name, version, blocks, block, max_len, printed) -> None:
    got = max_concurrency(blocks, block, max_len, version)
    print(f"\n[ledger] {log_name}@{max_len}: concurrency {got:.4f} vs printed {printed}", end="")
    assert round(got, 2) == printed


def test_v0_and_v1_concurrency_differ_where_the_notes_say() -> None:
    # 100,000 is not a multiple of 16: V1 0.9+ divides blocks by ceil(len / block), V0 by len / block
    assert max_concurrency(14408, 16, 100000, "0.10.2") == pytest.approx(14408 / 6250)
    assert max_concurrency(14408, 16, 100000, "0.6.4") == pytest.approx(14408 * 16 / 100000)


def test_the_fixture_weights_figure() -> None:
    """The 3090 log printed 'Loading model weights took 14.9888 GB' (GiB) for Llama-3.1-8B."""
    _, shape, params, cards, _ = PREDICT["v0.6.4-3090-llama3.1-8b@20000"]
    led = plan(shape, params, cards)
    print(f"\n[ledger] Llama-3.1-8B weights {led.weights_bytes_per_gpu / GiB:.4f} GiB vs 14.9888", end="")
    assert led.weights_bytes_per_gpu / GiB == pytest.approx(14.9888, abs=0.002)


def test_v0_profile_activation_matches_the_3090_log() -> None:
    """Memory profiling results: peak_torch 17.06 (20000 tokens) and 17.98 GiB (29000) - weights."""
    for case, peak in (("v0.6.4-3090-llama3.1-8b@20000", 17.06), ("v0.6.4-3090-llama3.1-8b@29000", 17.98)):
        _, shape, params, cards, _ = PREDICT[case]
        led = plan(shape, params, cards)
        assert led.activation_bytes / GiB == pytest.approx(peak - 14.9888, abs=0.02)


def test_prediction_uses_the_header_shape_only() -> None:
    # guard: the table entry used above is the public Llama-3.1-8B config
    s = lookup("meta-llama/Llama-3.1-8B-Instruct")
    assert (s.num_layers, s.num_kv_heads, s.head_dim, s.intermediate_size) == (32, 8, 128, 14336)
    assert replace(s, name="x").vocab_size == 128256
