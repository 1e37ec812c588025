"""The ledger's arithmetic, version behaviours and checks (pure functions, no files)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.ledger import Card, PlanParams, compare, kv_bytes_per_token, lookup, param_count, plan, valid_tp_sizes
from backend.ledger import overheads as ov
from backend.ledger.shapes import QWEN25, QWEN25_PARAMS, ModelShape, weight_parts, weights_per_gpu

GiB = 1 << 30
R3090 = Card("NVIDIA GeForce RTX 3090", int(24 * GiB), cc=(8, 6), source="planner")
T4 = Card("Tesla T4", int(15.36 * GiB), cc=(7, 5))


def repo_defaults(**kw) -> PlanParams:
    """config.toml: Qwen2.5-14B-Instruct, bf16, TP 2, utilization 0.90, 8192 tokens, 16 seqs."""
    base = dict(model="Qwen/Qwen2.5-14B-Instruct", dtype="bfloat16", tensor_parallel_size=2,
                gpu_memory_utilization=0.90, max_model_len=8192, max_num_seqs=16)
    base.update(kw)
    return PlanParams(**base)


def q14():
    return lookup("Qwen/Qwen2.5-14B-Instruct")


def kinds(led):
    return {p.kind: p for p in led.problems}


# -- KV per token ---------------------------------------------------------------------------------
def test_kv_per_token_qwen25_14b_is_192_kib_not_384_kb():
    led = plan(q14(), repo_defaults(), [R3090, R3090])
    assert led.kv_bytes_per_token == 196_608
    assert led.kv_bytes_per_token_per_gpu == 98_304
    assert kv_bytes_per_token(q14(), 2) == 196_608


def test_kv_per_token_qwen25_7b():
    s = lookup("Qwen/Qwen2.5-7B-Instruct")
    assert kv_bytes_per_token(s, 2) == 57_344
    led = plan(s, PlanParams(tensor_parallel_size=1, max_model_len=8192), [R3090])
    assert led.kv_bytes_per_token == 57_344 == led.kv_bytes_per_token_per_gpu


@pytest.mark.parametrize("size,per_token", [("0.5b", 12288), ("1.5b", 28672), ("3b", 36864),
                                            ("7b", 57344), ("14b", 196608), ("32b", 262144),
                                            ("72b", 327680)])
def test_kv_per_token_table_of_the_notes(size, per_token):
    assert kv_bytes_per_token(QWEN25[size], 2) == per_token


def test_kv_heads_replicated_when_fewer_than_tp():
    s = lookup("Qwen/Qwen2.5-0.5B-Instruct")  # 2 KV heads
    led = plan(s, PlanParams(tensor_parallel_size=4, max_model_len=4096, dtype="bfloat16"), [R3090] * 4)
    assert led.kv_bytes_per_token_per_gpu == 2 * 24 * 1 * 64 * 2  # one head per GPU
    assert led.kv_bytes_per_token_model == 12_288
    assert led.kv_bytes_per_token == 4 * led.kv_bytes_per_token_per_gpu  # what all GPUs hold


def test_fp8_kv_cache_halves_bytes_and_doubles_tokens():
    a = plan(q14(), repo_defaults(), [R3090, R3090])
    b = plan(q14(), repo_defaults(kv_cache_dtype="fp8"), [R3090, R3090])
    assert b.kv_bytes_per_token == a.kv_bytes_per_token // 2
    assert b.kv_cache_tokens == pytest.approx(2 * a.kv_cache_tokens, rel=0.001)


# -- weights --------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", list(QWEN25))
def test_qwen25_parameter_counts_are_exact(size):
    assert param_count(QWEN25[size]) == QWEN25_PARAMS[size]


def test_llama31_8b_parameter_count():
    assert param_count(lookup("meta-llama/Llama-3.1-8B")) == 8_030_261_248


def test_weights_sharding_across_tp():
    s = q14()
    parts = weight_parts(s, "bfloat16")
    w1, _ = weights_per_gpu(s, parts, 1)
    w2, _ = weights_per_gpu(s, parts, 2)
    replicated = parts.layers_replicated + parts.other_replicated
    assert w1 == parts.total
    assert w2 == pytest.approx((parts.total - replicated) / 2 + replicated, rel=1e-9)
    assert parts.total == pytest.approx(29.5e9, rel=0.01)


def test_tied_embeddings_are_counted_once():
    s = lookup("Qwen/Qwen2.5-3B-Instruct")
    parts = weight_parts(s, "bfloat16")
    assert parts.lm_head == 0 and parts.embed == 151936 * 2048 * 2


def test_awq_variant_is_about_a_quarter_of_bf16():
    bf16 = plan(q14(), repo_defaults(), [R3090, R3090])
    awq = plan(lookup("Qwen/Qwen2.5-14B-Instruct-AWQ"), repo_defaults(dtype=None), [R3090, R3090])
    assert awq.dtype == "float16"
    assert 0.3 < awq.weights_bytes / bf16.weights_bytes < 0.4  # embeddings stay 16-bit


def test_lookup_variants():
    assert lookup("Qwen/Qwen2.5-14B-Instruct").max_position_embeddings == 32768
    assert lookup("Qwen/Qwen2.5-14B").max_position_embeddings == 131072
    assert lookup("qwen2.5-0.5b").max_position_embeddings == 32768
    assert lookup("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8").quant.bits == 8
    assert lookup("Qwen/Qwen2.5-72B-Instruct-AWQ").quant.method == "awq"
    assert lookup("/models/Qwen2.5-32B-Instruct/").num_layers == 64
    assert lookup("Qwen/QwQ-32B").max_position_embeddings == 40960
    assert lookup("Qwen/Qwen2.5-13B-Instruct") is None
    assert lookup("mistralai/Mistral-7B-v0.1") is None


# -- the repo defaults ----------------------------------------------------------------------------
def test_repo_defaults_on_two_3090s():
    led = plan(q14(), repo_defaults(vllm_version="0.33.0"), [R3090, R3090])
    d = led.to_dict()
    assert d["fits"] is True
    assert d["weights_gib_per_gpu"] == pytest.approx(13.76, abs=0.01)
    assert d["budget_gib_per_gpu"] == pytest.approx(0.90 * 23.58, abs=0.01)
    assert 6.0 < d["kv_cache_gib_per_gpu"] < 7.5
    assert d["kv_cache_tokens"] % 16 == 0
    assert d["max_concurrency"] == pytest.approx(d["kv_cache_tokens"] / 8192, rel=0.001)
    assert 63.0 <= d["decode_tokens_per_s_ceiling"] <= 64.0
    # 16 full-length sequences do not fit in the cache: a warning, and it still fits
    p = kinds(led)["max-num-seqs-exceeds-cache"]
    assert p.severity == "warning" and p.fix.startswith("server.max_num_seqs = ")


def test_json_has_the_contract_keys():
    d = plan(q14(), repo_defaults(), [R3090, R3090]).to_dict()
    for key, typ in [("kv_bytes_per_token", int), ("kv_bytes_per_token_per_gpu", int),
                     ("weights_bytes", int), ("weights_gib_per_gpu", float),
                     ("budget_gib_per_gpu", float), ("kv_cache_gib_per_gpu", float),
                     ("kv_cache_tokens", int), ("max_concurrency", float), ("fits", bool),
                     ("problems", list), ("decode_tokens_per_s_ceiling", float)]:
        assert isinstance(d[key], typ), key
    for p in d["problems"]:
        assert set(p) >= {"kind", "message", "fix", "severity"}


# -- version behaviours ----------------------------------------------------------------------------
def test_default_utilization_by_version():
    assert plan(q14(), repo_defaults(gpu_memory_utilization=None, vllm_version="0.10.2"),
                [R3090] * 2).gpu_memory_utilization == 0.90
    assert plan(q14(), repo_defaults(gpu_memory_utilization=None, vllm_version="0.20.2"),
                [R3090] * 2).gpu_memory_utilization == 0.92


def test_cuda_graph_estimate_subtracted_from_0_20():
    """0.20.2 already prints "Estimated CUDA graph memory" and subtracts it (the H200 runs in
    tests/fixtures/gpu/calibration/); 0.19 captured them on top of the budget."""
    old = plan(q14(), repo_defaults(vllm_version="0.19.0"), [R3090] * 2)
    new = plan(q14(), repo_defaults(vllm_version="0.20.2"), [R3090] * 2)
    eager = plan(q14(), repo_defaults(vllm_version="0.20.2", enforce_eager=True), [R3090] * 2)
    assert not old.cuda_graphs_subtracted and new.cuda_graphs_subtracted
    assert new.kv_available_bytes_per_gpu == (new.budget_bytes_per_gpu - new.weights_bytes_per_gpu
                                              - new.activation_bytes - new.non_torch_bytes - new.cuda_graph_bytes)
    assert eager.cuda_graph_bytes == 0 and eager.compile_bytes == 0
    assert eager.kv_available_bytes_per_gpu == new.kv_available_bytes_per_gpu + new.cuda_graph_bytes + new.compile_bytes
    forced = plan(q14(), repo_defaults(vllm_version="0.19.0",
                                       env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}), [R3090] * 2)
    assert forced.cuda_graphs_subtracted


def test_cold_compile_is_planned_unless_the_cache_is_warm():
    cold = plan(q14(), repo_defaults(vllm_version="0.20.2"), [R3090] * 2)
    warm = plan(q14(), repo_defaults(vllm_version="0.20.2", compile_cache="warm"), [R3090] * 2)
    # TP=2: each GPU's cold peak holds its half of the 152,064 x 5,120 BF16 embedding
    embed_half = 152064 // 2 * 5120 * 2
    assert cold.compile_bytes > 0.9 * embed_half - warm.activation_bytes
    assert warm.compile_bytes == 0
    assert cold.kv_available_bytes_per_gpu == warm.kv_available_bytes_per_gpu - cold.compile_bytes
    assert any("first start" in n for n in cold.notes)


def test_v0_tensor_parallel_plans_the_driver_worker():
    """V0 with TP > 1: rank 0 also runs the sampler warm-up, and every worker's cache is sized by
    the smallest; the plan is the driver's."""
    tp1 = plan(q14(), repo_defaults(vllm_version="0.6.4", tensor_parallel_size=1, max_num_seqs=256), [R3090])
    tp2 = plan(q14(), repo_defaults(vllm_version="0.6.4", max_num_seqs=256), [R3090] * 2)
    assert any("driver worker" in n for n in tp2.notes) and not any("driver worker" in n for n in tp1.notes)
    assert tp2.activation_bytes >= 256 * 152064 * 4 * ov.V0_DRIVER_SAMPLER_COPIES


def test_graph_counts_follow_max_num_seqs():
    beh = ov.behaviour("0.21.0")
    # club-3090 logs: max_num_seqs 16 -> "PIECEWISE=7 (largest=32)"; decode FULL sizes up to 16
    assert ov.capture_sizes(beh, 16, 8192) == (7, 5)
    # v0.19dev log: "PIECEWISE=51 (largest=512), FULL=35 (largest=256)" with max_num_seqs 256
    assert ov.capture_sizes(beh, 256, 8192) == (51, 35)


def test_old_versions_count_the_cuda_context():
    v064 = plan(q14(), repo_defaults(vllm_version="0.6.4"), [R3090] * 2)
    v092 = plan(q14(), repo_defaults(vllm_version="0.9.2"), [R3090] * 2)
    assert v064.cuda_context_bytes > 0 and v092.cuda_context_bytes == 0


def test_tokens_from_concurrency_in_0_28():
    led = plan(q14(), repo_defaults(vllm_version="0.28.0", max_model_len=10000), [R3090] * 2)
    assert led.kv_cache_tokens == int(led.max_concurrency * 10000)


def test_large_card_defaults():
    h100 = Card("NVIDIA H100 80GB HBM3", int(79.65 * GiB), cc=(9, 0))
    led = plan(q14(), PlanParams(tensor_parallel_size=1, vllm_version="0.13.0"), [h100])
    assert (led.max_num_batched_tokens, led.max_num_seqs) == (8192, 1024)
    a100 = Card("NVIDIA A100-SXM4-80GB", int(80 * GiB), cc=(8, 0))
    led = plan(q14(), PlanParams(tensor_parallel_size=1, vllm_version="0.13.0"), [a100])
    assert (led.max_num_batched_tokens, led.max_num_seqs) == (2048, 256)


# -- checks ---------------------------------------------------------------------------------------
def test_max_model_len_beyond_the_model():
    led = plan(q14(), repo_defaults(max_model_len=65536), [R3090] * 2)
    p = kinds(led)["max-model-len-exceeds-model"]
    assert p.severity == "error" and p.fix == "server.max_model_len = 32768" and not led.fits
    ok = plan(q14(), repo_defaults(max_model_len=65536, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}),
              [R3090] * 2)
    assert kinds(ok)["max-model-len-exceeds-model"].severity == "warning"


def test_cpu_max_len_exceeds_model_fixture():
    """v0.32.0-cpu-max-len-exceeds-model.log: max_position_embeddings 4096, --max-model-len 100000."""
    tiny = ModelShape("tiny", 2, 256, 2, 1, 128, 512, 1024, 4096, tie_word_embeddings=True)
    led = plan(tiny, PlanParams(max_model_len=100000, gpu_memory_utilization=0.2, device="cpu"),
               [Card("CPU", int(9.59 * GiB), source="cpu")])
    assert kinds(led)["max-model-len-exceeds-model"].fix == "server.max_model_len = 4096"


def test_cpu_memory_fixture_free_memory_check():
    """v0.32.0-cpu-tiny-qwen2-cpu-memory.log: 7.57 of 9.21 GiB available, 0.92 x 9.21 = 8.48 asked."""
    tiny = ModelShape("tiny", 2, 64, 4, 2, 16, 128, 1024, 4096, tie_word_embeddings=True)
    led = plan(tiny, PlanParams(max_model_len=2048, device="cpu", vllm_version="0.32.0"),
               [Card("CPU", int(9.21 * GiB), memory_free_bytes=int(7.57 * GiB), source="cpu")])
    p = kinds(led)["free-memory-too-low"]
    assert p.severity == "error" and "server.gpu_memory_utilization = 0.81" in p.fix
    assert led.decode_tokens_per_s_ceiling is None


def test_tp_not_dividing_heads():
    led = plan(q14(), repo_defaults(tensor_parallel_size=3), [R3090] * 4)
    p = kinds(led)["tp-not-divisible"]
    assert "(40) must be divisible by tensor parallel size (3)" in p.message
    assert p.fix == "server.tensor_parallel_size = 4"
    assert valid_tp_sizes(q14(), 8) == [1, 2, 4, 8]
    assert valid_tp_sizes(lookup("Qwen/Qwen2.5-7B"), 8) == [1, 2, 4]  # 28 heads, 4 KV heads


def test_more_gpus_than_the_box_has():
    led = plan(q14(), repo_defaults(tensor_parallel_size=4), [R3090] * 2)
    assert kinds(led)["not-enough-gpus"].fix == "server.tensor_parallel_size = 2"


def test_weights_do_not_fit_one_3090():
    led = plan(q14(), repo_defaults(tensor_parallel_size=1, gpu_count=2), [R3090, R3090])
    p = kinds(led)["weights-exceed-budget"]
    assert not led.fits
    assert "server.tensor_parallel_size = 2" in p.fix
    assert 'server.model = "Qwen/Qwen2.5-14B-Instruct-AWQ"' in p.fix


def test_kv_too_small_for_max_model_len_names_the_length_that_fits():
    led = plan(q14(), repo_defaults(max_model_len=32768, gpu_memory_utilization=0.70), [R3090] * 2)
    p = kinds(led)["kv-cache-too-small-for-max-model-len"]
    assert not led.fits
    n = led.num_blocks * 16
    assert 0 < n < 32768 and f"server.max_model_len = {n}" in p.fix
    assert str(n) in p.message
    assert "kv_cache_dtype" in p.fix


def test_no_room_left_after_weights():
    led = plan(q14(), repo_defaults(gpu_memory_utilization=0.60), [R3090] * 2)
    p = kinds(led)["weights-exceed-budget"]
    assert not led.fits and led.num_blocks == 0 and led.kv_cache_tokens == 0
    assert "server.gpu_memory_utilization = 0.6" in p.fix


def test_bf16_on_pre_ampere_cards():
    led = plan(q14(), repo_defaults(), [T4, T4])
    assert kinds(led)["bf16-unsupported"].severity == "error"
    assert kinds(led)["bf16-unsupported"].fix == 'server.dtype = "float16"'
    by_name = plan(q14(), repo_defaults(), [Card("Tesla V100-SXM2-32GB", int(32 * GiB))] * 2)
    assert "bf16-unsupported" in kinds(by_name)
    half = plan(q14(), repo_defaults(dtype="float16"), [T4, T4])
    assert "bf16-unsupported" not in kinds(half)
    auto_new = plan(q14(), repo_defaults(dtype=None, vllm_version="0.13.0"), [T4, T4])
    assert kinds(auto_new)["bf16-unsupported"].severity == "warning"


def test_unknown_card_and_cpu_have_no_decode_ceiling():
    led = plan(q14(), repo_defaults(), [Card("Mystery Accelerator 9000", int(48 * GiB))] * 2)
    assert led.decode_tokens_per_s_ceiling is None and led.notes
    assert led.to_dict()["decode_tokens_per_s_ceiling"] is None


def test_decode_ceiling_uses_the_card_bandwidth():
    h200 = Card("NVIDIA H200", 150_754_820_096, cc=(9, 0))
    led = plan(q14(), repo_defaults(tensor_parallel_size=1), [h200])
    assert led.decode_tokens_per_s_ceiling == pytest.approx(4800e9 / led.weights_bytes_per_gpu)


def test_kv_cache_memory_bytes_overrides_utilization():
    led = plan(q14(), repo_defaults(kv_cache_memory_bytes=4 * GiB), [R3090] * 2)
    assert led.num_blocks == 4 * GiB // (16 * 98304)
    too_big = plan(q14(), repo_defaults(kv_cache_memory_bytes=12 * GiB), [R3090] * 2)
    assert "kv-cache-memory-bytes-too-large" in kinds(too_big)


def test_pipeline_parallel_splits_layers():
    led = plan(q14(), repo_defaults(tensor_parallel_size=1, pipeline_parallel_size=2), [R3090] * 2)
    assert led.kv_bytes_per_token_per_gpu == 2 * 24 * 8 * 128 * 2
    assert led.weights_bytes_per_gpu < 0.52 * led.weights_bytes


def test_heterogeneous_cards_use_the_smallest():
    big = Card("NVIDIA GeForce RTX 3090", int(24 * GiB))
    small = Card("NVIDIA GeForce RTX 4060 Ti", int(16 * GiB))
    led = plan(q14(), repo_defaults(), [big, small])
    assert led.usable_bytes_per_gpu == ov.usable_memory(int(16 * GiB))
    assert led.bandwidth_gbs == 288


# -- compare --------------------------------------------------------------------------------------
def test_compare_rows_and_off_flag():
    pred = plan(q14(), repo_defaults(), [R3090] * 2).to_dict()
    rows = compare(pred, {"kv_cache_gib": pred["kv_cache_gib_per_gpu"] * 1.02,
                          "kv_cache_tokens": int(pred["kv_cache_tokens"] * 0.9),
                          "max_concurrency": None, "weights_gib": 13.77})
    by = {r["name"]: r for r in rows}
    assert set(by) == {"weights GiB per GPU", "KV cache GiB per GPU", "KV cache tokens", "max concurrency",
                       "KV bytes per token per GPU"}
    assert by["KV cache GiB per GPU"]["off"] is False
    assert by["KV cache tokens"]["off"] is True and by["KV cache tokens"]["diff_pct"] > 5
    assert by["max concurrency"]["diff_pct"] is None and by["max concurrency"]["off"] is False
    assert by["weights GiB per GPU"]["off"] is False
    assert compare(pred, {"kv_cache_tokens": 0})[2]["off"] is True


def test_compare_derives_the_logs_kv_bytes_per_token_per_gpu():
    """vLLM prints KV GiB per GPU and tokens, never bytes per token: their ratio is one GPU's bytes per
    token, the figure the 2× error of the widely read write-up gets wrong."""
    pred = plan(q14(), repo_defaults(), [R3090] * 2).to_dict()
    assert (pred["kv_bytes_per_token"], pred["kv_bytes_per_token_per_gpu"]) == (196_608, 98_304)
    # what a 2×3090 TP=2 start prints: 6.72 GiB, 73,376 tokens (README's figures)
    row = compare(pred, {"kv_cache_gib": 6.72, "kv_cache_tokens": 73_376})[-1]
    assert row["name"] == "KV bytes per token per GPU" and row["actual"] == round(6.72 * 2**30 / 73_376)
    assert abs(row["diff_pct"]) < 0.1 and row["off"] is False
    wrong = dict(pred, kv_bytes_per_token_per_gpu=2 * 98_304)  # 384 KB in all, as the write-up says
    assert compare(wrong, {"kv_cache_gib": 6.72, "kv_cache_tokens": 73_376})[-1]["off"] is True
    assert compare(pred, {"kv_cache_gib": 6.72})[-1]["actual"] is None  # no tokens yet: no figure


def test_plan_is_pure_and_repeatable():
    a = plan(q14(), repo_defaults(), [R3090] * 2).to_dict()
    b = plan(replace(q14()), repo_defaults(), [R3090] * 2).to_dict()
    assert a == b


def test_utilization_too_high_for_the_cuda_context():
    led = plan(q14(), repo_defaults(gpu_memory_utilization=0.99, vllm_version="0.13.0"), [R3090] * 2)
    p = kinds(led)["utilization-too-high"]
    assert p.severity == "error" and p.fix == "server.gpu_memory_utilization = 0.98"
    assert "utilization-too-high" not in kinds(plan(q14(), repo_defaults(), [R3090] * 2))


def test_qwen3_2507_has_256k_context():
    assert lookup("Qwen/Qwen3-30B-A3B-Instruct-2507").max_position_embeddings == 262144
    assert lookup("Qwen/Qwen3-30B-A3B").max_position_embeddings == 40960


def test_moe_activation_is_the_fused_moe_workspaces_plus_one_layer_half():
    from backend.ledger.overheads import moe_forward_per_token

    # Qwen3-30B-A3B on one GPU: workspaces 8 x (max(768, 2048) + max(1536, 2048)) = 32,768 elements,
    # attention half 5,120 (qkv) + 4,096 (attention out) + 4,608 (q/k norm) + 3 x 2,048 = 19,968
    one = moe_forward_per_token(hidden=2048, tp=1, experts=128, experts_per_tok=8, moe_intermediate=768,
                                q_out=4096, kv_out=512, qk_norm=True)
    assert one == 32768 + 19968
    # a shared expert makes the MoE half the larger one (Qwen1.5-MoE-A2.7B: 4 x 2048 + 3 x 5632 + 60)
    shared = moe_forward_per_token(hidden=2048, tp=1, experts=60, experts_per_tok=4, moe_intermediate=1408,
                                   shared_intermediate=5632, q_out=2048, kv_out=2048)
    assert shared == 4 * (2048 + 2816) + 4 * 2048 + 3 * 5632 + 60
    # TP=2 halves N and the shared expert, not the hidden-size workspaces
    two = moe_forward_per_token(hidden=2048, tp=2, experts=60, experts_per_tok=4, moe_intermediate=1408,
                                shared_intermediate=5632, q_out=1024, kv_out=1024)
    assert two == 4 * (2048 + 2048) + 4 * 2048 + 3 * 2816 + 60


def test_qwen2_moe_shared_expert_counts_in_the_weights():
    from backend.ledger.shapes import from_config, param_count

    cfg = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
           "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936, "num_experts": 60,
           "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632}
    assert param_count(from_config(cfg, "q2moe")) == 14_315_784_192  # Qwen1.5-MoE-A2.7B: "14.3B"
    no_shared = dict(cfg, shared_expert_intermediate_size=0)
    assert param_count(from_config(cfg, "q2moe")) - param_count(from_config(no_shared, "q2moe")) == 24 * (
        3 * 2048 * 5632 + 2048)
