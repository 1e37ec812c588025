"""The ledger's model of vLLM's CPU worker, rank by rank (backend/ledger/cpu_model.py), against real CPU logs.

The plan gets what vLLM itself read when it started (the node memory: `requested / utilization`, since on
this VM the node's MemTotal grows while vLLM warms up and the total printed later is larger) and the
settings; everything else (the worker's resident memory, the shared-memory buffers, the smallest rank
binding) is modelled. vLLM's KV tokens must come out within 2 %.
"""

from __future__ import annotations

import io
import json

import pytest

from backend.ledger import Card, PlanParams, cpu_model, plan
from backend.logparse import LogParser
from tests.helpers import FIXTURES
from tests.unit.test_ledger_fixtures import TINY_QWEN2

GiB = 1 << 30
LOGS = FIXTURES / "vllm-logs"


def parsed(name: str) -> LogParser:
    p = LogParser(year=2026)
    for line in (LOGS / name).read_text(encoding="utf-8").splitlines():
        if not line.startswith("# "):
            p.feed(line)
    p.end_of_log()
    return p


def plan_like(p: LogParser, tp: int, bind: str | None) -> dict:
    util = p.info["gpu_memory_utilization"]
    ranks = p.rank_figures["requested_gib"]
    cards = [Card(f"CPU node {p.rank_figures['numa_node'][r]}", int(ranks[r] / util * GiB), source="cpu",
                  numa_node=p.rank_figures["numa_node"][r], threads=1) for r in sorted(ranks)]
    env = {"VLLM_CPU_OMP_THREADS_BIND": bind} if bind else {}
    params = PlanParams(model="tiny-qwen2", dtype="bfloat16", max_model_len=p.info["max_model_len"],
                        max_num_seqs=p.info.get("max_num_seqs"), gpu_memory_utilization=util,
                        tensor_parallel_size=tp, device="cpu", vllm_version=p.vllm_version, env=env)
    return plan(TINY_QWEN2, params, cards).to_dict()


# Log a: rank 1's resident set was 0.02 GiB above rank 0's (0.70 against 0.68; log b has 0.68 twice), and the
# engine keeps the smaller rank. That is the noise of vLLM's own measure (psutil rss after one warm-up pass): on a
# 1 GiB cache it is 2 %, so that log gets 3 %; the others 2 %.
@pytest.mark.parametrize("name,tp,bind,tol", [
    ("v0.32.0-cpu-tp2-ledger-a.log", 2, "0|1", 3.0),
    ("v0.32.0-cpu-tp2-ledger-b.log", 2, "0|1", 2.0),
    ("v0.32.0-cpu-tiny-qwen2-ready.log", 1, None, 2.0),
])
def test_cpu_plan_within_2pct_of_vllm(name: str, tp: int, bind: str | None, tol: float) -> None:
    p = parsed(name)
    assert p.was_ready
    assert len(p.rank_figures["requested_gib"]) == tp  # one "Auto set" line per worker
    led = plan_like(p, tp, bind)
    logged = p.figures["kv_cache_tokens"]
    err = (led["kv_cache_tokens"] - logged) / logged * 100
    print(f"{name}: plan {led['kv_cache_tokens']:,} vs vLLM {logged:,} ({err:+.2f} %)")
    assert abs(err) <= tol
    assert len(led["ranks"]) == tp
    for r in led["ranks"]:  # vLLM's own terms, rank by rank, within its 2-decimal rounding (+ RSS noise)
        assert r["requested_gib"] == pytest.approx(p.rank_figures["requested_gib"][r["rank"]], abs=0.006)
        assert r["consumed_gib"] == pytest.approx(p.rank_figures["non_kv_gib"][r["rank"]], abs=0.03)
    assert led["device_model"]["name"] == "vllm-cpu-worker"
    assert led["device_model"]["ranks"] == tp


def test_issue_numbers_tp2() -> None:
    """The TP=2 run quoted in issue 25: both ranks "Auto set (1.93/13.09) ... 2.62 GiB requested ... 0.68 GiB
    non-kv", then 2,027,392 tokens (the plan of the day said 1,703,168, -16 %)."""
    cards = [Card("CPU node 0", int(2.62 / 0.2 * GiB), source="cpu", numa_node=0, threads=1)] * 2
    led = plan(TINY_QWEN2, PlanParams(model="t", dtype="bfloat16", max_model_len=2048, max_num_seqs=8,
                                      gpu_memory_utilization=0.2, tensor_parallel_size=2, device="cpu",
                                      vllm_version="0.32.0", env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"}), cards)
    assert abs(led.kv_cache_tokens - 2_027_392) / 2_027_392 <= 0.02


def test_smallest_rank_binds() -> None:
    """Ranks on nodes of different sizes: the engine keeps the smallest rank's blocks."""
    cards = [Card("CPU node 0", 16 * GiB, source="cpu", numa_node=0, threads=4),
             Card("CPU node 1", 8 * GiB, source="cpu", numa_node=1, threads=4)]
    led = plan(TINY_QWEN2, PlanParams(model="t", max_model_len=2048, gpu_memory_utilization=0.5,
                                      tensor_parallel_size=2, device="cpu", vllm_version="0.32.0"), cards)
    kv = [r["kv_gib"] for r in led.to_dict()["ranks"]]
    assert kv[1] < kv[0]
    assert led.kv_available_bytes_per_gpu == min(r.kv_bytes for r in cpu_model.plan_ranks(
        0.5, [(0, 16 * GiB, None), (1, 8 * GiB, None)], [4, 4], weights=led.weights_bytes_per_gpu,
        activation=led.activation_bytes, runtime=led.cpu_baseline_bytes, tp=2, pp=1))


def test_shm_buffers_per_rank() -> None:
    # TP 2, one thread each: two populated segments of 4 MiB (+ one 256-byte context) on every rank
    assert cpu_model.shm_bytes(2, 1, 1) == 2 * (4 * 2**20 + 256)
    assert cpu_model.shm_bytes(1, 1, 8) == 0
    assert cpu_model.shm_bytes(2, 2, 3) == 4 * (3 * 4 * 2**20 + 768)


@pytest.mark.parametrize("mask,expect", [
    ("0|1", [(0, 1), (0, 1)]),           # manual lists: the node of each list's first CPU
    ("0-1|2-3", [(0, 2), (1, 2)]),
    ("0|2", [(0, 1), (1, 1)]),
    ("auto", [(0, 1), (1, 1)]),          # one NUMA node per rank, one CPU kept back for the engine
    ("nobind", [(0, 4), (0, 4)]),        # the process's first CPU
])
def test_bindings(mask: str, expect: list[tuple[int, int]]) -> None:
    node_of = {0: 0, 1: 0, 2: 1, 3: 1}
    got = cpu_model.bindings({"VLLM_CPU_OMP_THREADS_BIND": mask}, 2, cpus=[0, 1, 2, 3], node_of=node_of)
    assert [(b.node, b.threads) for b in got] == expect


def test_numa_autobind_short() -> None:
    one_node = {0: 0, 1: 0}
    assert cpu_model.numa_autobind_short({}, 2, cpus=[0, 1], node_of=one_node) == 1
    assert cpu_model.numa_autobind_short({"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, 2, [0, 1], one_node) is None
    assert cpu_model.numa_autobind_short({}, 1, cpus=[0, 1], node_of=one_node) is None


def test_explicit_kv_space_env() -> None:
    """VLLM_CPU_KVCACHE_SPACE (GiB) is vLLM's legacy kv_cache_memory_bytes on the CPU build."""
    led = plan(TINY_QWEN2, PlanParams(model="t", max_model_len=2048, gpu_memory_utilization=0.2, device="cpu",
                                      vllm_version="0.32.0", env={"VLLM_CPU_KVCACHE_SPACE": "1"}),
               [Card("CPU node 0", 10 * GiB, source="cpu")])
    assert led.kv_available_bytes_per_gpu == GiB
    assert "given" in led.device_model["kv_per_rank"]


def test_plan_json_names_device_model(tmp_path) -> None:
    from backend.ledger.cli import run_plan
    from backend.settings import load

    cfg = tmp_path / "model"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 256,
        "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
        "vocab_size": 1024, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}))
    (tmp_path / "c.toml").write_text("")
    s = load(str(tmp_path / "c.toml"), overrides=[f"server.model={cfg}", "server.tensor_parallel_size=2",
                              "server.env.VLLM_CPU_OMP_THREADS_BIND=0|1", "server.gpu_memory_utilization=0.2",
                              "planner.device=cpu"])
    buf = io.StringIO()
    assert run_plan(s, True, buf) == 0
    out = json.loads(buf.getvalue())
    assert out["device_model"]["name"] == "vllm-cpu-worker"
    assert [r["rank"] for r in out["ranks"]] == [0, 1]


def test_ranks_sharing_a_node_warned() -> None:
    card = Card("CPU node 0", 10 * GiB, memory_free_bytes=int(1.5 * GiB), source="cpu", numa_node=0, threads=1)
    led = plan(TINY_QWEN2, PlanParams(model="t", max_model_len=2048, gpu_memory_utilization=0.1,
                                      tensor_parallel_size=2, device="cpu", vllm_version="0.32.0",
                                      env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"}), [card, card])
    kinds = {p.kind: p.severity for p in led.problems}
    assert kinds.get("cpu-node-overcommitted") == "warning"  # 2 x 1.0 GiB of 1.5 GiB free
    one = plan(TINY_QWEN2, PlanParams(model="t", max_model_len=2048, gpu_memory_utilization=0.1, device="cpu",
                                      vllm_version="0.32.0"), [card])
    assert "cpu-node-overcommitted" not in {p.kind for p in one.problems}


def test_gpu_device_model_names_its_version_rules() -> None:
    from backend.ledger import lookup

    h200 = Card("NVIDIA H200", 150754820096, memory_reserved_bytes=644939776)
    new = plan(lookup("Qwen/Qwen2.5-14B-Instruct"), PlanParams(vllm_version="0.20.2", max_model_len=8192), [h200])
    old = plan(lookup("Qwen/Qwen2.5-14B-Instruct"), PlanParams(vllm_version="0.6.4", max_model_len=8192), [h200])
    assert new.device_model["range"].startswith("V1 >= 0.20")
    assert any(r.startswith("CUDA graphs estimated and subtracted") for r in new.device_model["version_rules"])
    assert any(r.startswith("CUDA graphs not estimated") for r in old.device_model["version_rules"])
    assert any("engine V0" in r for r in old.device_model["version_rules"])
