"""vLLM's own memory breakdown, read per worker: the GPU line in both wordings (0.1x-0.2x DEBUG "for weight", 0.32+
INFO "for consumed memory"), the CPU "Auto set" line, --max-model-len auto and the startup-plan lines; `parse-log
--json` carries them as `breakdown` (rank -> terms)."""

from __future__ import annotations

from backend.logparse import LogParser

# A real 0.2x line (a public log, gpu_worker.py:857, a 16 GiB card)
WEIGHT_WORDING = (
    "(EngineCore pid=79) INFO 07-30 07:11:20 [gpu_worker.py:857] Free memory on device (15.89/16.0 GiB) on startup. "
    "Desired GPU memory utilization is (0.95, 15.2 GiB). Actual usage is 0.88 GiB for weight, 0.26 GiB for peak "
    "activation, 0.16 GiB for non-torch memory, and 0.24 GiB for CUDAGraph memory. Replace gpu_memory_utilization "
    "config with `--kv-cache-memory=14514713805` (13.52 GiB) to fit into requested memory, or "
    "`--kv-cache-memory=15258363904` (14.21 GiB) to fully utilize gpu memory. Current kv cache memory in use is "
    "13.33 GiB.")

# The 0.32 wording (vllm/v1/worker/gpu_worker.py's format string, figures of a 2-GPU run)
CONSUMED_WORDING = [
    "(Worker_TP{r} pid=1{r}) INFO 12-01 10:00:00 [gpu_worker.py:1034] Free memory on device ({f}/23.56 GiB) on "
    "startup. Desired GPU memory utilization is (0.9, 21.2 GiB). Actual usage is {c} GiB for consumed memory "
    "(weights + non-torch), 1.41 GiB for peak activation, and 0.35 GiB for CUDAGraph memory. Replace "
    "gpu_memory_utilization config with `--kv-cache-memory=6000000000` (5.59 GiB) to fit into requested memory, or "
    "`--kv-cache-memory=7000000000` (6.52 GiB) to fully utilize gpu memory. Current kv cache memory in use is {k} GiB."
]


def feed(lines: list[str]) -> LogParser:
    p = LogParser(year=2026)
    for line in lines:
        p.feed(line)
    p.end_of_log()
    return p


def test_weight_wording() -> None:
    p = feed([WEIGHT_WORDING])
    b = p.report()["breakdown"]["0"]
    assert b["device_free_gib"] == 15.89 and b["device_total_gib"] == 16.0
    assert b["requested_gib"] == 15.2
    assert b["breakdown_weights_gib"] == 0.88 and b["non_torch_gib"] == 0.16
    assert b["consumed_gib"] == 1.04  # weights + non-torch, as 0.32 prints it
    assert b["activation_peak_gib"] == 0.26 and b["cuda_graph_memory_gib"] == 0.24
    assert b["kv_cache_in_use_gib"] == 13.33
    assert b["kv_cache_memory_to_requested"] == 14514713805
    assert p.info["gpu_memory_utilization"] == 0.95


def test_consumed_wording_per_rank() -> None:
    lines = [CONSUMED_WORDING[0].format(r=0, f="23.1", c="14.55", k="5.44"),
             CONSUMED_WORDING[0].format(r=1, f="23.0", c="14.61", k="5.38")]
    rep = feed(lines).report()
    assert set(rep["breakdown"]) == {"0", "1"}
    assert rep["breakdown"]["0"]["consumed_gib"] == 14.55 and rep["breakdown"]["1"]["consumed_gib"] == 14.61
    assert rep["breakdown"]["1"]["kv_cache_in_use_gib"] == 5.38
    assert "breakdown_weights_gib" not in rep["breakdown"]["0"]


def test_old_bytes_wording() -> None:
    """Early 0.10 builds printed the KV in use in bytes, without the GiB figures in brackets."""
    line = ("(EngineCore_DP0 pid=2) INFO 09-28 21:12:51 [v1/worker/gpu_worker.py:391] Free memory on device "
            "(23.08/23.53 GiB) on startup. Desired GPU memory utilization is (0.8, 18.82 GiB). Actual usage is 8.8 GiB "
            "for weight, 1.4 GiB for peak activation, 0.02 GiB for non-torch memory, and 0.68 GiB for CUDAGraph "
            "memory. Replace gpu_memory_utilization config with `--kv-cache-memory=8347223347` to fit into requested "
            "memory, or `--kv-cache-memory=12923195904` to fully utilize gpu memory. Current kv cache memory in use "
            "is 9232221491 bytes.")
    b = feed([line]).report()["breakdown"]["0"]
    assert b["kv_cache_in_use_gib"] == 8.6
    assert b["kv_cache_memory_to_gpu"] == 12923195904


def test_cpu_auto_set_per_rank() -> None:
    lines = [f"(Worker_TP{r} pid=7) INFO 12-02 02:12:25 [cpu_worker.py:260] Auto set ({kv}/9.09) GiB for KV cache on "
             f"node 0, with 1.72 GiB requested memory for the worker. {c} GiB memory was consumed by non-kv usages."
             for r, kv, c in ((0, "1.03", "0.68"), (1, "1.02", "0.7"))]
    p = feed(lines)
    rep = p.report()
    assert rep["breakdown"]["1"] == {"node_total_gib": 9.09, "numa_node": 0, "requested_gib": 1.72,
                                     "non_kv_gib": 0.7, "kv_cache_gib": 1.02}
    assert rep["kv_cache_gib"] == 1.02  # the smaller rank binds
    explicit = feed(["(Worker pid=7) INFO 12-02 02:12:25 [cpu_worker.py:250] Explicitly set (4/9.09) GiB for KV "
                     "cache on node 0."])
    assert explicit.figures["kv_cache_gib"] == 4.0


def test_auto_fit_and_startup_plan() -> None:
    p = feed([
        "(EngineCore pid=3) INFO 12-01 10:00:00 [kv_cache_planning.py:480] Auto-fit max_model_len: reduced from "
        "32768 to 20480 to fit in available KV cache memory (3.12 GiB GPU)",
        "(Worker pid=4) INFO 12-01 10:00:00 [startup_plan.py:154] Applying persisted startup plan (fingerprint "
        "ab12cd): kv_cache_memory_bytes=3350000000 (3.12 GiB), recorded free-memory baseline 22.80 GiB, current "
        "22.79 GiB. Memory profiling will be skipped.",
        "(Worker pid=4) INFO 12-01 10:00:01 [startup_plan.py:189] Saved startup plan to /root/.cache/vllm/plans/ab.json",
    ])
    rep = p.report()
    assert rep["auto_fit"] is True and rep["auto_fit_from"] == 32768 and rep["max_model_len"] == 20480
    assert rep["startup_plan_applied"] == "ab12cd"
    assert rep["startup_plan_saved"] == "/root/.cache/vllm/plans/ab.json"
    assert p.engine == "v1"  # kv_cache_planning.py (0.33) counts as a V1 file
    full = feed(["INFO 12-01 10:00:00 [kv_cache_utils.py:2469] Auto-fit max_model_len: full model context length "
                 "4096 fits in available KV cache memory (1.00 GiB GPU)"]).report()
    assert full["max_model_len"] == 4096 and full["auto_fit_from"] == 4096


def test_no_breakdown_without_its_lines() -> None:
    p = feed(["(EngineCore pid=1) INFO 12-01 10:00:00 [gpu_model_runner.py:1] Model loading took 27.6 GiB "
              "memory and 5.1 s"])
    assert p.report()["breakdown"] == {}


def test_compile_cache_warm_or_cold() -> None:
    from tests.helpers import FIXTURES

    cal = FIXTURES / "gpu" / "calibration"
    cold = LogParser(year=2026)
    for line in (cal / "7b-u020-cold.log").read_text(encoding="utf-8").splitlines():
        cold.feed(line)
    warm = LogParser(year=2026)
    for line in (cal / "7b-u020-warm.log").read_text(encoding="utf-8").splitlines():
        warm.feed(line)
    assert cold.report()["compile_cache"] == "cold" and warm.report()["compile_cache"] == "warm"
    assert cold.figures["compile_cache_key"] == warm.figures["compile_cache_key"]  # the same settings, one key


def test_ledger_panel_rows_put_vllm_terms_beside_the_plan() -> None:
    from backend.ledger import compare

    plan = {"budget_gib_per_gpu": 125.82, "weights_gib_per_gpu": 27.57, "kv_cache_gib_per_gpu": 96.0,
            "overheads_gib_per_gpu": {"non_torch": 0.27, "activation_peak": 0.9, "cuda_graphs": 0.12,
                                      "cuda_graphs_subtracted": True}}
    parsed = {"breakdown": {"0": {"requested_gib": 125.82, "consumed_gib": 27.81, "activation_peak_gib": 0.9,
                                  "cuda_graph_memory_gib": 0.1, "kv_cache_in_use_gib": 96.87}}}
    rows = {r["name"]: r for r in compare(plan, parsed)}
    assert rows["rank 0 requested GiB"]["diff_pct"] == 0.0
    assert rows["rank 0 weights + non-torch GiB"]["predicted"] == 27.84
    assert rows["rank 0 KV cache GiB"]["actual"] == 96.87 and not rows["rank 0 KV cache GiB"]["off"]
    assert rows["rank 0 CUDA graphs GiB"]["off"]  # 0.12 planned, 0.10 measured: 20 %
    cpu = {"ranks": [{"rank": 0, "requested_gib": 1.72, "consumed_gib": 0.676, "kv_gib": 1.044},
                     {"rank": 1, "requested_gib": 1.72, "consumed_gib": 0.676, "kv_gib": 1.044}]}
    cpu_rows = compare(cpu, {"breakdown": {"0": {"requested_gib": 1.72, "non_kv_gib": 0.68, "kv_cache_gib": 1.03},
                                           "1": {"requested_gib": 1.72, "non_kv_gib": 0.7, "kv_cache_gib": 1.02}}})
    names = [r["name"] for r in cpu_rows if r["name"].startswith("rank")]
    assert names == ["rank 0 requested GiB", "rank 0 non-KV GiB", "rank 0 KV cache GiB",
                     "rank 1 requested GiB", "rank 1 non-KV GiB", "rank 1 KV cache GiB"]
