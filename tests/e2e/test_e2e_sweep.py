"""End to end: a concurrency sweep and a profile against the real vLLM CPU demo server (minutes)."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers.e2e import cli, wait_state

pytestmark = pytest.mark.e2e
START_TIMEOUT = 420


@pytest.fixture(scope="module")
def server(tmp_path_factory, vllm_lock):
    from backend import procs

    home = tmp_path_factory.mktemp("e2e-sweep-home")
    old = os.environ.get("QWEN_TUI_HOME")
    os.environ["QWEN_TUI_HOME"] = str(home)
    assert not procs.find_vllm_processes(), "vLLM processes are already running on this machine"
    r = cli("--demo", "serve", "--detach", timeout=60)
    assert r.returncode == 0, r.stderr
    st = wait_state({"ready", "failed"}, START_TIMEOUT)
    assert st["state"] == "ready", st
    yield home
    cli("stop", timeout=120)
    for p in procs.find_vllm_processes():
        p.kill()
    if old is None:
        os.environ.pop("QWEN_TUI_HOME", None)
    else:
        os.environ["QWEN_TUI_HOME"] = old


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
        assert row["metrics_samples"] > 0 and row["peak_kv_cache_usage"] is not None
        assert row["queued"] in (True, False) and row["peak_waiting"] is not None
        assert row["above_max_concurrency"] is False  # the demo's cache holds hundreds
    # a 1.7M-token cache: a few hundred tokens per request is a sliver, but some sample sees it
    assert any(row["peak_running"] >= 1 and row["peak_kv_cache_usage"] > 0 for row in rows)
    assert out["predicted"]["max_concurrency"] > 0 and out["predicted"]["source"] == "server log"
    assert out["settings"]["server"]["max_num_seqs"] == 8 and out["input_tokens"] == 200
    saved = out["saved"]
    assert os.path.exists(saved["json"]) and os.path.exists(saved["csv"])
    assert str(server) in saved["json"]


def test_profile_plans_on_the_demo_box(server):
    r = cli("--demo", "--profile", "batch", "plan", "--json", timeout=60)
    out = json.loads(r.stdout)
    assert out["max_model_len"] == 4096 and out["max_num_seqs"] == 32
