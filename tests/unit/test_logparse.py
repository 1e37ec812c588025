"""The log parser against every real vLLM log in tests/fixtures/vllm-logs/, plus the parse-log CLI.

Each fixture has a `#` header (source, version, `# extract:` figures, `# outcome:` with a failure
kind in the naming of the time it was written). The expectations below are written out per fixture;
where a header names a failure whose signature lies outside the excerpt (the report was cut before
the exception line), the test says so and checks what the excerpt does show.
"""

from __future__ import annotations

import io
import json
import re

import pytest

from backend.logparse import FAILURE_KINDS, PHASES, LogParser
from backend.logparse.cli import run_parse_log
from tests.helpers import FIXTURES

FIXTURES = FIXTURES / "vllm-logs"
ALL_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.log"))

CONTRACT_KEYS = ["vllm_version", "engine", "ready", "phase", "weights_gib", "weights_seconds", "kv_cache_gib",
                 "kv_cache_tokens", "gpu_blocks", "max_concurrency", "max_concurrency_tokens",
                 "cuda_graph_seconds", "init_engine_seconds", "listen_url", "failure"]
NULL_STATE = {k: None for k in CONTRACT_KEYS}
NULL_STATE.update(ready=False, phase="starting")

# Header kind names (old and new) -> the console's kinds.
HEADER_KIND_MAP = {
    "kv-cache-too-small-for-max-model-len": {"kv_cache_too_small"},
    "cuda-oom": {"oom_loading", "oom_runtime", "oom_unknown"},
    "nccl-error": {"nccl_p2p"},
    "tp-collective-failure": {"nccl_p2p"},
    "gpu-memory-precheck": {"memory_in_use"},
    "shm-too-small": {"shm_too_small"},
    "missing-cuda-library": {"missing_cuda_library"},
    "corrupt/incomplete": {"weights_incomplete"},
    "port-in-use": {"port_in_use"},
    "engine-core-start-failure": {"unknown"},  # a wrapper line: no root cause in the excerpt
    **{k: {k} for k in FAILURE_KINDS},
}


def read_fixture(name: str) -> tuple[list[str], list[str]]:
    """(header lines, body lines): the header is the leading `#` block; `# [cut]` / `# segments:` body
    lines are annotations and are dropped."""
    lines = (FIXTURES / name).read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1
    body = [ln for ln in lines[i:] if not ln.startswith(("# [cut]", "# segments:"))]
    return lines[:i], body


def segments(name: str) -> list[list[str]]:
    """The body split at `# [cut]` markers (fixtures that hold several runs)."""
    lines = (FIXTURES / name).read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines) and lines[i].startswith("#") and not lines[i].startswith("# segments:"):
        i += 1
    segs: list[list[str]] = [[]]
    for ln in lines[i:]:
        if ln.startswith("# [cut]"):
            segs.append([])
        elif not ln.startswith("# segments:") and ln != "":
            segs[-1].append(ln)
    return [s for s in segs if s]


def header_kind(header: list[str]) -> str | None:
    for ln in header:
        if ln.startswith("# outcome:"):
            m = re.search(r"\bkinds?: ([\w/-]+)", ln)
            return m.group(1) if m else None
    return None


def parse(lines: list[str]) -> LogParser:
    p = LogParser()
    for ln in lines:
        p.feed(ln)
    return p


# Per fixture: `state` = the snapshot fields that are not null/false/"starting" (all others must be),
# `kind` = failure kind from the log alone, `after_exit` = kind once told the process exited with 1,
# `fix` = substrings the fix must contain, `figures` = extra figures, `header` = True when the header's
# kind is visible in the excerpt (so the mapped header kind must equal ours).
EXPECTED: dict[str, dict] = {
    "nccl-shm-too-small-canonical-texts.log": dict(
        state=dict(phase="failed"), kind="shm_too_small", header=True,
        fix=["--ipc=host", "--shm-size", 'NCCL_SHM_DISABLE = "1" in [server.env]', "7.0 MiB"]),
    "v0.10.2-fp8kv-kv-ok-and-maxlen-fail-summary.log": dict(
        state=dict(engine="v1", phase="failed", kv_cache_gib=5.59, kv_cache_tokens=230528, max_concurrency=2.31,
                   max_concurrency_tokens=100000),
        kind="kv_cache_too_small", header=True, fix=["server.max_model_len = 122080"],
        figures=dict(kv_needed_gib=10.12, estimated_max_model_len=122080)),
    "v0.10.2dev-qwen2.5-0.5b-tp2-v1-startup-head.log": dict(
        state=dict(vllm_version="0.10.2.dev378+g4d7fe40fc.d20250829", engine="v1"), kind=None, after_exit="unknown",
        figures=dict(max_model_len=32768, max_num_batched_tokens=2048, architecture="Qwen2ForCausalLM",
                     model="/data/datasets/models-hf/Qwen2.5-0.5B/"),
        info=dict(tensor_parallel_size=2)),
    "v0.11.0-h100-gpt-oss-120b-tp1-kv-insufficient-fail.log": dict(
        state=dict(engine="v1", phase="failed", kv_cache_gib=1.71), kind="kv_cache_too_small", header=True,
        # the estimate is cut in the paste: the fix scales 131072 by 1.71/4.54 instead
        fix=["server.max_model_len to about 49360", "server.gpu_memory_utilization"],
        figures=dict(kv_needed_gib=4.54)),
    "v0.11.0-v1-qwen2.5-omni-enginecore-oom-line.log": dict(
        # the OOM line alone: nothing says whether it was loading or after, so no guess
        state=dict(engine="v1", phase="failed"), kind="oom_unknown", header=True,
        fix=["other processes hold 14.11 GiB", "113.62 MiB of 22.05 GiB free", "server.tensor_parallel_size"]),
    "v0.15.2rc1-5070ti+5090d-qwen3-coder-30b-pp2-kv-insufficient-fail.log": dict(
        state=dict(engine="v1", phase="failed", kv_cache_gib=3.18), kind="kv_cache_too_small", header=True,
        fix=["server.max_model_len = 34736 (the largest vLLM estimated)"],
        figures=dict(kv_needed_gib=24.0, estimated_max_model_len=34736)),
    "v0.19dev-qwen3.5-gguf-tp1-kv-cudagraph-estimate.log": dict(
        state=dict(engine="v1", phase="cuda_graphs", kv_cache_gib=6.9, kv_cache_tokens=89760, max_concurrency=1.36,
                   max_concurrency_tokens=262144),
        kind=None, after_exit="unknown", figures=dict(cuda_graph_estimate_gib=1.62)),
    "v0.2.2-qwen-7b-import-libcudart-fail.log": dict(
        state=dict(phase="failed"), kind="missing_cuda_library", header=True,
        fix=["libcudart.so.12", "nvidia-cuda-runtime-cu12", "LD_LIBRARY_PATH in [server.env]"]),
    "v0.20.x-worker_tp0-model-loading-compile-head.log": dict(
        state=dict(engine="v1", phase="profiling", weights_gib=12.66, weights_seconds=31.657031),
        kind=None, after_exit="unknown", figures=dict(weights_read_seconds=24.84, dynamo_seconds=3.54)),
    "v0.20.2-h200-qwen2.5-14b-shape-tp1-util0.17-no-cache-memory-fail.log": dict(
        # "Available KV cache memory: -5.03 GiB", then "No available memory for the cache blocks"
        state=dict(vllm_version="0.20.2", engine="v1", phase="failed", weights_gib=27.57, weights_seconds=0.820557,
                   kv_cache_gib=-5.03),
        kind="no_cache_memory", message="ValueError: No available memory for the cache blocks.",
        fix=["server.gpu_memory_utilization (now 0.17)"], figures=dict(compile_seconds=7.55, max_model_len=8192)),
    "v0.20.2-h200-qwen2.5-14b-shape-tp1-util0.90-ready.log": dict(
        state=dict(vllm_version="0.20.2", engine="v1", ready=True, phase="ready", weights_gib=27.57,
                   weights_seconds=0.960759, kv_cache_gib=96.31, kv_cache_tokens=525984, max_concurrency=64.21,
                   max_concurrency_tokens=8192, cuda_graph_seconds=2.0, init_engine_seconds=55.43,
                   listen_url="http://127.0.0.1:8000"),
        kind=None, figures=dict(compile_seconds=37.43, cuda_graph_gib=0.1, cuda_graph_count=12,
                                cuda_graph_estimate_gib=0.09, generation_throughput=61.1)),
    "v0.32.0-cpu-bad-argument.log": dict(
        state=dict(phase="failed"), kind="bad_argument", header=True,
        fix=["--max-model-lenn", "--max-model-len", "server.max_model_len"]),
    "v0.32.0-cpu-max-len-exceeds-model.log": dict(
        state=dict(vllm_version="0.32.0", engine="v1", phase="failed"), kind="max_len_exceeds_model", header=True,
        fix=["server.max_model_len = 4096", "VLLM_ALLOW_LONG_MAX_MODEL_LEN"]),
    "v0.32.0-cpu-model-not-found.log": dict(
        state=dict(vllm_version="0.32.0", engine="v1", phase="failed"), kind="model_not_found", header=True,
        fix=["server.model = '/srv/models/no-such-model'"]),
    "v0.32.0-cpu-tiny-qwen2-cpu-memory.log": dict(
        state=dict(vllm_version="0.32.0", engine="v1", phase="failed"), kind="cpu_memory", header=True,
        fix=["7.57 of 9.21 GiB", "server.gpu_memory_utilization = 0.92", "8.48 GiB",
             "set server.gpu_memory_utilization = 0.8"]),
    "v0.32.0-cpu-tp2-numa-autobind-fail.log": dict(
        # the root cause (EngineCore's AssertionError), not the API server's wrapper RuntimeError that ends the log
        state=dict(vllm_version="0.32.0", engine="v1", phase="failed"), kind="cpu_binding",
        message="AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers",
        fix=['VLLM_CPU_OMP_THREADS_BIND = "0|1"', "[server.env]", "server.tensor_parallel_size"]),
    "v0.32.0-cpu-tp2-ready-then-worker-killed.log": dict(
        # TP=2 on the CPU build: ready, then kill -9 of Worker_TP1; the root cause is the worker's death
        state=dict(vllm_version="0.32.0", engine="v1", phase="failed", weights_seconds=0.01, kv_cache_gib=1.02,
                   kv_cache_tokens=1068416, max_concurrency=521.69, max_concurrency_tokens=2048,
                   init_engine_seconds=34.62, listen_url="http://127.0.0.1:18611"),
        kind="engine_dead", message="Worker proc VllmWorker-1 died unexpectedly",
        figures=dict(kv_cache_budget_gib=9.09)),
    "v0.32.0-cpu-tiny-qwen2-ready.log": dict(
        state=dict(vllm_version="0.32.0", engine="v1", ready=True, phase="ready", weights_seconds=0.02,
                   kv_cache_gib=1.25, kv_cache_tokens=1309184, max_concurrency=639.25, max_concurrency_tokens=2048,
                   init_engine_seconds=47.33, listen_url="http://127.0.0.1:8011"),
        kind=None, figures=dict(kv_cache_budget_gib=9.59, model="/srv/models/tiny-qwen2")),
    "v0.32.0-cpu-tp2-ledger-a.log": dict(
        # two workers: the smaller rank's KV cache binds; then Worker_TP1 was killed (-9) on purpose
        state=dict(vllm_version="0.32.0", engine="v1", phase="failed", kv_cache_gib=1.02, kv_cache_tokens=1068416,
                   max_concurrency=521.69, max_concurrency_tokens=2048, weights_seconds=0.01,
                   init_engine_seconds=34.62, listen_url="http://127.0.0.1:18611"),
        kind="engine_dead", figures=dict(kv_cache_budget_gib=9.09, requested_gib=1.72, non_kv_gib=0.7)),
    "v0.32.0-cpu-tp2-ledger-b.log": dict(
        state=dict(vllm_version="0.32.0", engine="v1", phase="stopped", kv_cache_gib=1.43, kv_cache_tokens=1502720,
                   max_concurrency=733.75, max_concurrency_tokens=2048, weights_seconds=0.01,
                   init_engine_seconds=20.54, listen_url="http://127.0.0.1:18611"),
        kind=None, figures=dict(kv_cache_budget_gib=10.59, requested_gib=2.12, non_kv_gib=0.68)),
    "v0.32.0-cpu-weights-incomplete.log": dict(
        state=dict(vllm_version="0.32.0", engine="v1", phase="failed"), kind="weights_incomplete", header=True,
        fix=["/srv/models/tiny-qwen2-broken", "server.model"]),
    "v0.3x-v1-intel-arc-kv-insufficient-models-typo-fixed.log": dict(
        # the paste wraps "KV cach/e is needed": the available figure comes from the continuation line
        state=dict(engine="v1", phase="failed", kv_cache_gib=4.25), kind="kv_cache_too_small", header=True,
        fix=["server.max_model_len to about 99760"], figures=dict(kv_needed_gib=4.26)),
    "v0.4.2-wsl-ray-yi-34b-awq-tp2-startup-head.log": dict(
        state=dict(vllm_version="0.4.2", engine="v0"), kind=None, after_exit="unknown",
        figures=dict(executor="ray", wsl=True, max_model_len=4096), info=dict(tensor_parallel_size=2),
        worker_ranks={("RayWorkerWrapper", "7596", None): 1}),
    "v0.4.x-ray-tp-custom-allreduce-nccl-fail.log": dict(
        # only custom_all_reduce.py frames in the excerpt: soft evidence, used once the process fails
        state=dict(), kind=None, after_exit="nccl_p2p", header=True, fix=['NCCL_P2P_DISABLE = "1" in [server.env]']),
    "v0.4.x-torch2.1-2080ti22g-qwen2-7b-fp32-oom.log": dict(
        state=dict(phase="failed"), kind="oom_unknown", header=True, fix=["4.06 MiB of 21.67 GiB free"]),
    "v0.5.3.post1-qwen2-7b-tp2-mp-startup-head.log": dict(
        state=dict(vllm_version="0.5.3.post1", engine="v0"), kind=None, after_exit="unknown",
        figures=dict(model="/data/wjc/Qwen/Qwen2-7B-Instruct/")),
    "v0.5.4-v100-glm4-9b-libcudart-warning-startup.log": dict(
        # a WARNING: vLLM keeps going, so no failure until the process dies (the bf16 error is not in the excerpt)
        state=dict(vllm_version="0.5.4", engine="v0"), kind=None, after_exit="missing_cuda_library", header=True,
        figures=dict(max_model_len=8192)),
    "v0.5.x-wsl-weights1.96g-oom-after-load-fail.log": dict(
        # "Process SpawnProcess-1:" + traceback: the engine process died; the OOM text is below the excerpt
        state=dict(engine="v0", phase="failed", weights_gib=1.9634), kind="unknown"),
    "v0.6.0-2x3090-nvlink-llama3.1-8b-gptq-tp2-startup-head.log": dict(
        state=dict(vllm_version="0.6.0", engine="v0"), kind=None, after_exit="unknown", info=dict(port=8000)),
    "v0.6.1-v0-load-model-oom-traceback.log": dict(
        # frames through load_model/get_model only: the OOM exception line is below the excerpt
        state=dict(), kind=None, after_exit="unknown"),
    "v0.6.4-qwen2-vl-72b-tp1-startup-head-oom.log": dict(
        state=dict(vllm_version="0.6.4", engine="v0"), kind=None, after_exit="unknown",
        figures=dict(max_model_len=32768)),
    "v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log": dict(
        state=dict(engine="v0", phase="failed", weights_gib=14.9888, kv_cache_gib=2.89, kv_cache_tokens=23648,
                   gpu_blocks=1478, max_concurrency=0.82, max_concurrency_tokens=29000),
        kind="kv_cache_too_small", header=True,
        fix=["server.max_model_len = 23648", "server.gpu_memory_utilization (now 0.9)"],
        figures=dict(cpu_blocks=2048, total_gpu_gib=23.58)),
    "v0.6.4.post1-4090-qwen2.5-7b-fp8-dynamic-tp1-profile-oom-fail.log": dict(
        # the header says "during profiling", but the excerpt shows no load/profile lines or frames,
        # so the parser cannot tell, and says so (oom_unknown) rather than guess "loading"
        state=dict(phase="failed"), kind="oom_unknown", header=True,
        fix=["tried to allocate 4.62 GiB", "3.32 GiB of 22.16 GiB free"]),
    "v0.6.x-2x3090-qwen2-vl-72b-awq-tp2-safetensors-header-fail.log": dict(
        state=dict(phase="failed"), kind="weights_incomplete", header=True),
    "v0.6.x-ci-uvicorn-port-in-use-debug.log": dict(
        state=dict(phase="failed"), kind="port_in_use", header=True, fix=["port 44319", "server.port"]),
    "v0.6.x-internal-port-eaddrinuse-fail.log": dict(
        state=dict(phase="failed"), kind="port_in_use", header=True, fix=['VLLM_PORT', "[server.env]"]),
    "v0.6.x-v0-mq-internvl2.5-78b-safetensors-load-fail.log": dict(
        # load_model frames only; the SafetensorError line is below the excerpt
        state=dict(engine="v0"), kind=None, after_exit="unknown"),
    "v0.7.x-v0-qwen2.5-32b-multigpu-vllmworkerprocess-cudagraph.log": dict(
        state=dict(engine="v0", phase="cuda_graphs", max_concurrency=10.64, max_concurrency_tokens=32768),
        kind=None, after_exit="unknown"),
    "v0.7.x-v1-llama3.1-70b-w8a8-tp1-kv-gpu-blocks.log": dict(
        state=dict(engine="v1", phase="kv_cache", weights_gib=67.7229, kv_cache_tokens=22096, gpu_blocks=1381,
                   max_concurrency=10.79, max_concurrency_tokens=2048),
        kind=None, after_exit="unknown", figures=dict(compile_seconds=54.73, dynamo_seconds=12.88)),
    "v0.8.1-v1-deepseek-r1-distill-qwen-7b-tp-allgather-fail.log": dict(
        state=dict(vllm_version="0.8.1", engine="v1", phase="failed"), kind="nccl_p2p", header=True,
        fix=['NCCL_P2P_DISABLE = "1" in [server.env]'], figures=dict(max_num_batched_tokens=2048)),
    "v0.8.5-v1-qwen2.5-vl-class-load-oom-lmhead.log": dict(
        # ParallelLMHead frames only; the OOM line is below the excerpt
        state=dict(engine="v1"), kind=None, after_exit="unknown"),
    "v0.8.5-v1-weights18g-enginecore-failed-kvinit.log": dict(
        state=dict(engine="v1", phase="failed", weights_gib=18.145, weights_seconds=40.766484), kind="unknown",
        header=True, message="EngineCore failed to start.",
        figures=dict(weights_read_seconds=38.52, dynamo_seconds=19.0)),
    "v0.8.5dev-2xrtx5090-qwq-32b-bnb-pp2-kv-maxlen-fail.log": dict(
        state=dict(vllm_version="0.8.5.dev169+gce17db808.d20250423", engine="v0", phase="failed",
                   kv_cache_tokens=58384, gpu_blocks=3649),
        kind="kv_cache_too_small", header=True, fix=["server.max_model_len = 58384"],
        info=dict(port=8000, gpu_memory_utilization=0.85, max_model_len=60000)),
    "v0.8.x-ray-multinode-worker-oom-prefix-ip.log": dict(
        # frames only (the OOM text is in the issue title, not the excerpt)
        state=dict(), kind=None, after_exit="unknown",
        worker_ranks={("RayWorkerWrapper", "206994", "192.168.10.25"): 1}),
    "v0.9.0-rtx4060ti8g-qwen2.5-0.5b-tp1-kv-partial.log": dict(
        state=dict(engine="v1", phase="kv_cache", kv_cache_tokens=91472), kind=None, after_exit="unknown",
        figures=dict(compile_seconds=5.56)),
    "v0.9.x-v1-engine-core-init-failed-final-line.log": dict(
        state=dict(engine="v1", phase="failed"), kind="unknown", header=True,
        message="RuntimeError: Engine core initialization failed."),
}


def test_every_fixture_has_expectations():
    assert sorted(EXPECTED) == ALL_FIXTURES
    assert len(ALL_FIXTURES) >= 40


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_fixture(name):
    exp = EXPECTED[name]
    header, body = read_fixture(name)
    p = parse(body)
    snap = p.snapshot()
    assert list(snap) == CONTRACT_KEYS
    failure = snap.pop("failure")
    want = dict(NULL_STATE, **exp["state"])
    want.pop("failure")
    assert snap == want
    assert p.bad_lines == 0
    if exp["kind"] is None:
        assert failure is None
    else:
        assert failure["kind"] == exp["kind"]
        assert failure["message"] and failure["fix"]
        for part in exp.get("fix", []):
            assert part in failure["fix"], (part, failure["fix"])
        if "message" in exp:
            assert failure["message"].startswith(exp["message"])
    for key, value in exp.get("figures", {}).items():
        assert p.figures.get(key) == value, key
    for key, value in exp.get("info", {}).items():
        assert p.info.get(key) == value, key
    for key, value in exp.get("worker_ranks", {}).items():
        assert p._ranks.order.get(key) == value
    if exp.get("after_exit"):
        p.process_exited(1)
        f = p.snapshot()["failure"]
        assert p.phase == "failed"
        assert f["kind"] == exp["after_exit"]
        for part in exp.get("fix", []):
            assert part in f["fix"]
    if exp.get("header"):
        kind = exp["kind"] or exp["after_exit"]
        assert kind in HEADER_KIND_MAP[header_kind(header)]


def test_header_kinds_are_all_known():
    for name in ALL_FIXTURES:
        header, _ = read_fixture(name)
        kind = header_kind(header)
        if kind is not None:
            assert kind in HEADER_KIND_MAP, (name, kind)


def test_rtx3090_runs_separately():
    """Three runs of one report: 20000 fits, 29000 does not, 35000 is cut after its first line."""
    runs = segments("v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log")
    assert len(runs) == 3
    ok = parse(runs[0])
    assert ok.snapshot() == dict(NULL_STATE, engine="v0", phase="kv_cache", weights_gib=14.9888, kv_cache_gib=3.81,
                                 kv_cache_tokens=31232, gpu_blocks=1952, max_concurrency=1.56,
                                 max_concurrency_tokens=20000)
    assert ok.figures["cpu_blocks"] == 2048
    assert ok.info["gpu_memory_utilization"] == 0.9
    bad = parse(runs[1])
    s = bad.snapshot()
    assert (s["kv_cache_gib"], s["gpu_blocks"], s["kv_cache_tokens"], s["max_concurrency"]) == (2.89, 1478, 23648, 0.82)
    assert s["failure"]["kind"] == "kv_cache_too_small"
    assert s["failure"]["message"].startswith("The model's max seq len (29000)")
    third = parse(runs[2])
    assert third.snapshot()["weights_gib"] == 14.9888 and third.phase == "profiling"


def test_fp8kv_runs_separately():
    runs = segments("v0.10.2-fp8kv-kv-ok-and-maxlen-fail-summary.log")
    assert len(runs) == 2
    ok = parse(runs[0]).snapshot()
    assert (ok["kv_cache_gib"], ok["kv_cache_tokens"], ok["max_concurrency"], ok["max_concurrency_tokens"]) == \
        (10.55, 230528, 2.31, 100000)
    assert ok["failure"] is None and ok["phase"] == "kv_cache"
    bad = parse(runs[1])
    assert bad.snapshot()["kv_cache_gib"] == 5.59
    assert bad.figures["kv_needed_gib"] == 10.12
    assert bad.snapshot()["failure"]["fix"].startswith(
        "set server.max_model_len = 122080 (the largest vLLM estimated), or raise server.gpu_memory_utilization")


def test_qwq_later_run_serves():
    runs = segments("v0.8.5dev-2xrtx5090-qwq-32b-bnb-pp2-kv-maxlen-fail.log")
    later = parse(runs[-1])
    assert later.figures["generation_throughput"] == 9.0
    assert later.figures["requests_running"] == 0
    assert later.snapshot()["failure"] is None


def test_cpu_ready_timeline_uses_log_timestamps():
    _, body = read_fixture("v0.32.0-cpu-tiny-qwen2-ready.log")
    p = parse(body)
    phases = [m.phase for m in p.timeline]
    assert phases == ["starting", "loading_weights", "profiling", "kv_cache", "ready"]
    d = {ph: dur for ph, _, dur in p.phase_durations()}
    assert d["starting"] == 44.0      # 08:33:18 (logo) -> 08:34:02 "Starting to load model"
    assert d["loading_weights"] == 2.0  # -> 08:34:04 "Warming up model for the compilation..."
    assert d["profiling"] == 46.0     # -> 08:34:50 "Auto set (1.25/9.59) GiB for KV cache"
    assert d["kv_cache"] == 5.0       # -> 08:34:55 (uvicorn's line carries no stamp: last seen)
    assert d["ready"] is None


def test_cpu_ready_then_sigterm_is_stopped():
    _, body = read_fixture("v0.32.0-cpu-tiny-qwen2-ready.log")
    p = parse(body)
    assert p.snapshot()["ready"] is True
    p.feed("INFO:     Shutting down")
    p.feed("(APIServer pid=17335) ERROR 11-29 08:40:00 [core_client.py:610] Engine core proc EngineCore died unexpectedly, shutting down client.")
    p.feed("INFO:     Application shutdown complete.")
    p.process_exited(-15)
    s = p.snapshot()
    assert s["phase"] == "stopped" and s["failure"] is None and s["ready"] is False


# --- CLI ------------------------------------------------------------------------------------------

def _cli(path: str, as_json: bool) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = run_parse_log(path, as_json, out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def test_cli_json_contract(tmp_path):
    _, body = read_fixture("v0.32.0-cpu-tiny-qwen2-ready.log")
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(body) + "\n", encoding="utf-8")
    rc, out, err = _cli(str(log), True)
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert list(data)[:len(CONTRACT_KEYS)] == CONTRACT_KEYS  # the contract first, in order; more keys after
    assert data["ready"] is True and data["phase"] == "ready" and data["phase"] in PHASES
    assert data["kv_cache_tokens"] == 1309184 and data["listen_url"] == "http://127.0.0.1:8011"
    assert isinstance(data["kv_cache_gib"], float) and isinstance(data["gpu_blocks"], type(None))


def test_cli_json_failure_and_exit_code_zero():
    rc, out, err = _cli(str(FIXTURES / "v0.32.0-cpu-tiny-qwen2-cpu-memory.log"), True)
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert data["phase"] == "failed"
    assert data["failure"]["kind"] == "cpu_memory"
    assert data["failure"]["message"].startswith("ValueError: Available memory on node 0 (7.57/9.21 GiB)")
    assert set(data["failure"]) == {"kind", "message", "fix", "context"}  # context: the wrapper lines after it
    assert data["failure"]["context"][-1].startswith("RuntimeError: Engine core initialization failed")


def test_cli_skips_fixture_header_annotations():
    # the nccl fixture's header itself mentions "No space left on device": it must not be parsed
    rc, out, _ = _cli(str(FIXTURES / "nccl-shm-too-small-canonical-texts.log"), True)
    data = json.loads(out)
    assert data["failure"]["message"].startswith("Error while creating shared memory segment /dev/shm/nccl-1YsMbG")


def test_cli_human_summary():
    rc, out, err = _cli(str(FIXTURES / "v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log"), False)
    assert rc == 0 and err == ""
    assert "V0 engine" in out and "phase: FAILED" in out
    assert "23,648 tokens" in out and "1,478 blocks" in out and "0.82x at 29,000 tokens per request" in out
    assert "FAILED: kv_cache_too_small" in out
    assert "set server.max_model_len = 23648" in out
    rc, out, _ = _cli(str(FIXTURES / "v0.32.0-cpu-tiny-qwen2-ready.log"), False)
    assert "phase: ready" in out and "listening on http://127.0.0.1:8011" in out
    assert "Timeline" in out and "loading_weights" in out and "+1m 37s" in out


def test_cli_unreadable_file(tmp_path):
    rc, out, err = _cli(str(tmp_path / "nope.log"), True)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "nope.log" in err and "Traceback" not in err
    rc, out, err = _cli(str(tmp_path), False)  # a directory
    assert rc == 2 and err.startswith("qwen-tui parse-log: cannot read")


def test_cli_stdin(monkeypatch):
    data = "INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381\nINFO:     Application startup complete.\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    rc, out, err = _cli("-", True)
    assert rc == 0
    d = json.loads(out)
    assert d["gpu_blocks"] == 1381 and d["kv_cache_tokens"] == 22096 and d["ready"] is True


def test_cli_binary_garbage(tmp_path):
    log = tmp_path / "garbage.log"
    log.write_bytes(b"\x00\xff\xfe\x1b[31m\r\r\n" + bytes(range(256)) * 40 + b"\nINFO:     Application startup complete.\n")
    rc, out, err = _cli(str(log), True)
    assert rc == 0 and json.loads(out)["phase"] == "ready"
