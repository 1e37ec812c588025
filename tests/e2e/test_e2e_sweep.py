"""End to end: a concurrency sweep and a profile against the real vLLM CPU demo server (minutes)."""

from __future__ import annotations

import json
import os

import pytest

from backend import demo
from tests.helpers.e2e import cli, demo_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory, vllm_lock):
    home = tmp_path_factory.mktemp("e2e-sweep-home")
    with demo_server(home):
        yield home


def test_sweep_one_row_per_level_with_the_fields(server):
    r = cli("--demo", "bench", "--sweep", "1,2,4", "--json", timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = json.loads(r.stdout)
    rows = out["levels"]
    assert [row["concurrency"] for row in rows] == [1, 2, 4]
    for row in rows:
        assert row["completed"] == row["requests"] and row["failed"] == 0 and row["errors"] == []
        assert row["ttft_ms"]["mean"] > 0 and row["ttft_ms"]["p50"] > 0 and row["ttft_ms"]["p99"] > 0
        assert row["output_tokens_per_s"] > 0 and row["requests_per_s"] > 0
        # None when the tokens reached the client in bursts (2 busy CPUs): no rate then
        assert (row["per_request_tokens_per_s"] is None) == row["burst"]
        # the server's own figures while the level ran (vLLM's CPU build exports them too)
        # a level whose samples never saw a request running says so and shows no peak (never a 0 %)
        assert row["metrics_samples"] > 0
        if row["peak_kv_cache_usage"] is None:
            assert "none of" in row["metrics_error"] and row["queued"] is None
        else:
            assert row["queued"] in (True, False) and row["peak_waiting"] is not None
        assert row["above_max_concurrency"] is False  # the demo's cache holds hundreds
    # a level whose samples saw a request running shows its sliver of the 1.7M-token cache above 0
    for row in rows:
        if row["peak_running"]:
            assert row["peak_kv_cache_usage"] > 0
    assert out["predicted"]["max_concurrency"] > 0 and out["predicted"]["source"] == "server log"
    assert out["settings"]["server"]["max_num_seqs"] == 8 and out["input_tokens"] == 200
    saved = out["saved"]
    assert os.path.exists(saved["json"]) and os.path.exists(saved["csv"])
    assert str(server) in saved["json"]


def test_profile_plans_on_the_demo_box(server):
    r = cli("--demo", "--profile", "batch", "plan", "--json", timeout=60)
    out = json.loads(r.stdout)
    batch = demo.PROFILES["batch"]  # the demo box's own batch profile, not the GPU one
    assert out["max_model_len"] == batch["max_model_len"] and out["max_num_seqs"] == batch["max_num_seqs"]
    assert (out["max_model_len"], out["max_num_seqs"]) != (2048, 8)  # not the demo's defaults: the profile applied
