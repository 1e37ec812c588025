"""Replays of the real GPU run (benchmarks/gpu_e2e.py on the lent H200, vLLM 0.20.2, kept in
tests/fixtures/gpu/): the parser on its server logs, the ledger against its figures, and what the
record says the console, orphan scan and supervisor did there."""

from __future__ import annotations

import json

import pytest

from backend.ledger import compare
from backend.ledger.replay import replay
from backend.logparse import LogParser, is_permanent
from tests.helpers import FIXTURES

GPU = FIXTURES / "gpu"
RECORD = json.loads((GPU / "h200-gpu-e2e.json").read_text())
LOGS = GPU / "e2e-logs"


def parse(name: str, exit_code: int | None = None) -> dict:
    p = LogParser()
    for line in (LOGS / name).read_text(errors="replace").splitlines():
        p.feed(line)
    if exit_code is not None:
        p.process_exited(exit_code)
    return p.snapshot()


@pytest.mark.parametrize("path", ["h200-gpu-e2e.json", "h200-gpu-e2e-run2/gpu_e2e.json"])
def test_every_check_of_the_recorded_run_passed(path):
    record = json.loads((GPU / path).read_text())
    assert record["checks"] and all(c["ok"] for c in record["checks"].values()), \
        {k: v for k, v in record["checks"].items() if not v["ok"]}
    assert set(record["checks"]) >= {"doctor_no_false_failure", "ready", "chat_below_ceiling",
                                     "bench_no_failed_request", "kill9_no_false_orphan", "kill9_restarted_ready",
                                     "stop_released", "util017_no_cache_memory_not_restarted", "gpu_empty_at_end"}


def test_parser_reads_the_served_run_like_the_supervisor_did():
    snap = parse("vllm-20261201-085821-2500-0.log", exit_code=-9)
    served = next(s for s in RECORD["steps"] if s["name"] == "serve")
    st = json.loads(served["stdout"][served["stdout"].index("{"):])
    assert snap["kv_cache_tokens"] == st["kv_cache_tokens"] == 529_856
    assert snap["max_concurrency"] == st["max_concurrency"]
    assert snap["vllm_version"] == "0.20.2" and snap["weights_gib"] == 27.57
    # killed with -9 after READY: a failure, but one a restart may cure
    assert snap["failure"] and not is_permanent(snap["failure"]["kind"], was_ready=True)


def test_the_util_017_log_is_a_permanent_no_cache_memory():
    snap = parse("vllm-20261201-090053-2989-0.log", exit_code=1)
    assert snap["failure"]["kind"] == "no_cache_memory" and is_permanent("no_cache_memory")
    assert "gpu_memory_utilization" in snap["failure"]["fix"]
    final = RECORD["util017"]["final"]
    assert final["restarts"] == 0 and final["last_failure"]["kind"] == "no_cache_memory"


def test_ledger_panel_comparison_of_the_real_run():
    """What the console's ledger panel shows beside the log: within 5 %, nothing marked."""
    r = replay(GPU / "calibration" / "u090-warm.log")
    rows = {row["name"]: row for row in compare(r.ledger.to_dict(), r.vllm)}
    assert rows["KV cache tokens"]["off"] is False and rows["max concurrency"]["off"] is False


@pytest.mark.parametrize("log", sorted(p.name for p in (GPU / "calibration").glob("*.log")))
def test_the_logs_bytes_per_token_per_gpu_is_the_ledgers(log):
    """Every kept GPU run (dense and MoE shapes, BF16 and fp8 KV): the log's KV GiB over its KV tokens
    is the ledger's bytes per token per GPU within 0.1 % (the GiB is printed with 2 decimals)."""
    r = replay(GPU / "calibration" / log)
    row = compare(r.ledger.to_dict(), r.vllm)[-1]
    assert row["name"] == "KV bytes per token per GPU" and abs(row["diff_pct"]) < 0.1, row


def test_orphan_scan_never_listed_what_the_supervisor_was_reaping():
    snaps = RECORD["kill9"]["snapshots"]
    reaping = [s for s in snaps if s["reaping"]]
    assert reaping, "the record shows no reaping window"
    assert all(s["state"] == "failed" for s in reaping)
    assert all(not set(s["orphans"]) & set(s["reaping"]) for s in snaps)
    after = RECORD["kill9"]["after"]
    assert after["state"] == "ready" and after["restarts"] == 1
    assert "GPU memory released" in after["stop_report"]


@pytest.mark.parametrize("key", ["ttft_s", "tokens_per_s"])
def test_chat_figures_are_below_the_ceiling(key):
    chat = RECORD["chat"][-1]
    assert chat[key] is not None
    assert chat["tokens_per_s"] <= chat["decode_tokens_per_s_ceiling"]
