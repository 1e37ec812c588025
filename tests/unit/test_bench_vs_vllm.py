"""benchmarks/bench_vs_vllm.py's bookkeeping, on recorded figures (no server, no vLLM): ratios of
the per-round medians, what the server saw per tool, and the warning when the work differed."""

from __future__ import annotations

import importlib.util

from tests.helpers import ROOT

spec = importlib.util.spec_from_file_location("bench_vs_vllm", ROOT / "benchmarks" / "bench_vs_vllm.py")
vs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vs)


def row(k, q_tps, v_tps, q_ttft, v_ttft, q_computed=168.0, v_computed=168.0):
    figs = {f: None for f in vs.FIGURES}
    q = dict(figs, output_tok_s=q_tps, ttft_mean_ms=q_ttft)
    v = dict(figs, output_tok_s=v_tps, ttft_mean_ms=v_ttft)
    q["server_saw"] = {"prompt_tokens": 167.0, "output_tokens": 128.0, "prompt_tokens_computed": q_computed}
    v["server_saw"] = {"prompt_tokens": 168.5, "output_tokens": 128.0, "prompt_tokens_computed": v_computed}
    return {"round": k, "qwen": q, "vllm": v}


def test_ratios_of_medians_and_the_target():
    rounds = [row(1, 990, 1000, 300, 310), row(2, 700, 1000, 500, 300), row(3, 1010, 1000, 305, 300)]
    r = vs.summarize(rounds)
    assert r["output_tok_s"] == {"qwen_tui": 990, "vllm": 1000, "ratio": 0.99, "within_target": True}
    assert r["ttft_mean_ms"]["ratio"] == round(305 / 300, 3) and r["ttft_mean_ms"]["within_target"]
    assert "within_target" not in r["tpot_mean_ms"]
    assert vs.comparable(rounds) == []


def test_prefix_cache_hits_on_one_side_are_flagged():
    """On the demo's 525-id vocabulary vLLM's random prompts shared prefixes: the cache served ~30 %."""
    rounds = [row(k, 1000, 1000, 300, 300, v_computed=118.0) for k in (1, 2)]
    assert any("computed" in w for w in vs.comparable(rounds))


def test_what_the_server_saw_per_request():
    before = {"prompt": 0.0, "generation": 0.0, "requests": 10.0, "ttft_sum": 1.0, "ttft_count": 10.0,
              "computed": 0.0}
    after = {"prompt": 168.0 * 4, "generation": 512.0, "requests": 14.0, "ttft_sum": 2.0, "ttft_count": 14.0,
             "computed": 100.0 * 4}
    saw = vs.per_request(before, after)
    assert saw == {"requests": 4.0, "prompt_tokens": 168.0, "output_tokens": 128.0, "ttft_mean_ms": 250.0,
                   "prompt_tokens_computed": 100.0}


def test_the_server_splits_its_ttft_into_queue_and_prefill():
    zero = dict.fromkeys(vs.SERVER_COUNTERS, 0.0)
    after = dict(zero, requests=8.0, ttft_sum=0.8, ttft_count=8.0, queue_sum=0.16, queue_count=8.0,
                 prefill_sum=0.48, prefill_count=8.0, prompt=8 * 168.0, generation=8 * 128.0)
    saw = vs.per_request(zero, after)
    assert (saw["ttft_mean_ms"], saw["queue_mean_ms"], saw["prefill_mean_ms"]) == (100.0, 20.0, 60.0)
    # a server without the histograms (an older vLLM): no figure rather than a zero
    assert "queue_mean_ms" not in vs.per_request(zero, dict(zero, requests=1.0))


def test_the_first_wave_is_told_apart_by_start_time_not_by_list_order():
    res = {"start_times": [10.3, 10.0, 10.1, 11.0, 12.0], "ttfts": [0.02, 0.3, 0.1, 0.04, 0.0]}
    # the two earliest (10.0, 10.1) are the first wave; 0.0 is a failed request and is left out
    assert vs.waves(res, 2) == {"ttft_first_wave_ms": 200.0, "ttft_rest_ms": 30.0}
    assert vs.waves({}, 8) == {"ttft_first_wave_ms": None, "ttft_rest_ms": None}


def test_vllm_replays_prompts_of_the_form_qwen_tui_bench_sends():
    from backend.bench.loadtest import prompt_text

    a, b = vs.qwen_prompts(5, 3), vs.qwen_prompts(5, 3)
    assert len(a) == 3 and len(set(a)) == 3
    # the same words after a run tag of the same length as bench's own: the same token count
    tag = a[0].split(" ")[1][: -len("0.")]
    assert a == [prompt_text(i, 5, tag) for i in range(3)]
    assert a[0] != b[0]  # a fresh tag each run: no prefix-cache hit on an earlier run's prompts


def test_the_h200_records_summarize_as_they_were_printed():
    """The kept H200 runs (tests/fixtures/gpu/h200-bench-vs-vllm/): same prompts agree within 5 %;
    vLLM's random-text prompts do not on TTFT, and the server's own TTFT says the work differed."""
    import json
    import statistics

    from tests.helpers import FIXTURES

    base = FIXTURES / "gpu" / "h200-bench-vs-vllm"
    same, rand = (json.loads((base / m / "vs_vllm.json").read_text()) for m in ("same", "random"))
    for rec in (same, rand):
        again = vs.summarize(rec["rounds"])
        assert {k: again[k]["ratio"] for k in again} == {k: rec["ratios"][k]["ratio"] for k in again}
        assert len(rec["rounds"]) == 5 and len(rec["warmup"]) == 1  # the warm-up is not in the medians
    assert same["ratios"]["output_tok_s"]["within_target"] and same["ratios"]["ttft_mean_ms"]["within_target"]
    assert not rand["ratios"]["ttft_mean_ms"]["within_target"]
    server = {t: statistics.median(r[t]["server_saw"]["ttft_mean_ms"] for r in rand["rounds"])
              for t in ("qwen", "vllm")}
    assert server["qwen"] / server["vllm"] < 0.95  # the server, not qwen-tui's clock, was faster for qwen-tui


def test_the_demo_record_of_twelve_rounds_is_within_target():
    """tests/fixtures/bench-vs-vllm-demo/: the same prompts, the demo server on one core, 12 rounds."""
    import json

    from tests.helpers import FIXTURES

    rec = json.loads((FIXTURES / "bench-vs-vllm-demo" / "vs_vllm.json").read_text())
    again = vs.summarize(rec["rounds"])
    assert {k: again[k]["ratio"] for k in again} == {k: rec["ratios"][k]["ratio"] for k in again}
    assert rec["config"]["prompts"] == "same" and rec["config"]["server_threads_pinned"] > 0
    assert len(rec["rounds"]) == 12 and all(e["within_target"] for e in again.values() if "within_target" in e)
