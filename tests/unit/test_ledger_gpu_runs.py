"""The ledger against every real GPU run the project made (tests/fixtures/gpu/calibration/, from
benchmarks/gpu_calibrate.py on the lent H200: vLLM 0.20.2, two model shapes, utilization 0.17-0.95,
batch sizes, eager, fp8 KV cache, cold and warm compile caches). Each is planned from its header
alone and must land within 5 % of vLLM's own KV tokens and max concurrency."""

from __future__ import annotations

import pytest

from backend.ledger.replay import replay
from tests.helpers import FIXTURES

RUNS = sorted((FIXTURES / "gpu" / "calibration").glob("*.log"))
TOL_PCT = 5.0


def test_the_grid_is_there():
    names = {p.stem for p in RUNS}
    assert len(RUNS) >= 20
    # the cases that matter: a 24 GB-card-sized budget, cold and warm, eager, fp8, another shape,
    # two MoE shapes (with and without a shared expert) at two batch sizes
    assert {"u025", "u025-eager", "u025-fp8kv", "u090-warm", "7b-u020-cold", "7b-u020-warm"} <= names
    assert {"q2moe-u030-eager", "q2moe-u030-eager-mnbt2048", "q2moe-u030-cold", "q3moe-u060-eager",
            "q3moe-u060-eager-mnbt2048", "q3moe-u060-warm"} <= names


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_plan_lands_within_5_percent(path):
    r = replay(path)
    assert r is not None, f"{path.name}: header does not say enough to plan"
    for key in ("kv_cache_tokens", "max_concurrency"):
        err = r.error_pct(key)
        assert err is not None, f"{path.name}: no {key} in the log"
        assert abs(err) <= TOL_PCT, (f"{path.name} ({r.compile_cache} compile cache): {key} planned "
                                     f"{getattr(r.ledger, key)}, vLLM {r.vllm.get(key)} ({err:+.1f} %)")


def test_cold_start_is_planned_by_default_and_costs_memory():
    r = replay(next(p for p in RUNS if p.stem == "u025"))
    assert r.compile_cache == "cold" and r.ledger.compile_bytes > 0.5 * 2**30
    warm = replay(next(p for p in RUNS if p.stem == "u090-warm"))
    assert warm.compile_cache == "warm" and warm.ledger.compile_bytes == 0


def test_usable_memory_is_nvml_total_less_its_reserved_share():
    r = replay(RUNS[0])
    card = r.ledger.cards[0]
    assert card["reserved_gib"] == pytest.approx(0.601, abs=0.001)
    assert r.ledger.usable_bytes_per_gpu == 150754820096 - 644939776


def test_the_plan_says_what_is_measured_and_what_it_expects():
    from backend.ledger import PlanParams, lookup, plan
    from backend.ledger.core import Card

    h200 = Card("NVIDIA H200", 150754820096, memory_reserved_bytes=644939776)
    one = plan(lookup("Qwen/Qwen2.5-14B-Instruct"), PlanParams(vllm_version="0.20.2", max_model_len=8192), [h200])
    assert one.basis["family"].startswith("vLLM V1 >= 0.20") and one.basis["expected_error_pct"] == 2.0
    assert any("NVML" in e for e in one.basis["exact"])
    two = plan(lookup("Qwen/Qwen2.5-14B-Instruct"),
               PlanParams(vllm_version="0.20.2", tensor_parallel_size=2, max_model_len=8192), [h200, h200])
    assert two.basis["expected_error_pct"] == 5.0 and any("tensor parallel" in m for m in two.basis["not_measured"])
    old = plan(lookup("Qwen/Qwen2.5-14B-Instruct"), PlanParams(vllm_version="0.6.4", max_model_len=8192), [h200])
    assert old.basis["expected_error_pct"] > 5 and old.to_dict()["basis"] == old.basis


def test_moe_runs_are_planned_from_their_own_config_and_weights_match_the_log():
    for stem, gib in (("q2moe-u030-eager", 26.67), ("q3moe-u060-eager", 56.88)):
        r = replay(next(p for p in RUNS if p.stem == stem))
        assert r.ledger.notes and any("MoE" in n for n in r.ledger.notes)
        # "Model loading took 26.67 GiB" / "56.88 GiB": the shared expert counted, the router replicated
        assert abs(r.ledger.weights_bytes_per_gpu / 2**30 - gib) < 0.01, stem


def test_moe_forward_slope_matches_the_two_batch_sizes():
    """The activation model's per-token slope against what vLLM's KV budget lost between 2,048 and
    8,192 batched tokens (eager, so no compile or graphs in between)."""
    for shape in ("q2moe-u030", "q3moe-u060"):
        big = replay(next(p for p in RUNS if p.stem == f"{shape}-eager"))
        small = replay(next(p for p in RUNS if p.stem == f"{shape}-eager-mnbt2048"))
        logged = small.vllm["kv_cache_gib"] - big.vllm["kv_cache_gib"]
        planned = (big.ledger.activation_bytes - small.ledger.activation_bytes) / 2**30
        assert logged > 0.4 and abs(planned - logged) / logged < 0.1, (shape, planned, logged)
