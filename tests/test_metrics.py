"""backend.metrics on real /metrics text captured from vLLM CPU 0.32 (tests/fixtures/metrics)."""

from __future__ import annotations

import pytest

from backend import metrics
from conftest import FIXTURES

IDLE = (FIXTURES / "metrics" / "vllm-0.32-cpu-idle.txt").read_text()
AFTER = (FIXTURES / "metrics" / "vllm-0.32-cpu-after.txt").read_text()


def test_snapshot_of_a_real_server_after_two_chats() -> None:
    s = metrics.snapshot(AFTER, at=10.0)
    assert (s.running, s.waiting, s.kv_cache_usage) == (0.0, 0.0, 0.0)
    assert (s.prompt_tokens, s.generation_tokens) == (85.0, 56.0)
    assert s.requests_finished == 2.0  # stop + length, summed over the finished_reason labels
    assert s.ttft_count == 2.0 and 0 < s.ttft_sum < 1
    assert s.preemptions == 0.0 and s.prefix_queries == 85.0 and s.prefix_hits == 0.0


def test_rates_between_two_snapshots() -> None:
    before, after = metrics.snapshot(IDLE, at=10.0), metrics.snapshot(AFTER, at=12.0)
    r = metrics.rates(before, after)
    assert r["generation_tokens_per_s"] == pytest.approx((56 - before.generation_tokens) / 2)
    assert r["prompt_tokens_per_s"] == pytest.approx((85 - before.prompt_tokens) / 2)
    assert r["ttft_mean_s"] == pytest.approx((after.ttft_sum - before.ttft_sum) / (2 - before.ttft_count))
    assert r["prefix_hit_rate"] == 0.0
    assert metrics.rates(None, after)["generation_tokens_per_s"] is None
    # a counter going down is a restarted server, not a negative rate
    assert metrics.rates(after, metrics.snapshot(IDLE, at=13.0))["generation_tokens_per_s"] is None


def test_older_kv_usage_name_and_data_parallel_engines_add_up() -> None:
    text = ('vllm:gpu_cache_usage_perc{model_name="m"} 0.25\n'
            'vllm:num_requests_running{engine="0",model_name="m"} 3\n'
            'vllm:num_requests_running{engine="1",model_name="m"} 2\n')
    s = metrics.snapshot(text)
    assert s.kv_cache_usage == 0.25 and s.running == 5.0 and s.waiting is None


def test_malformed_text_is_a_clear_error() -> None:
    with pytest.raises(metrics.MetricsError, match="malformed /metrics"):
        metrics.snapshot('vllm:num_requests_running{model_name="m" 3\n')


def test_a_dead_server_is_a_clear_error() -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(metrics.MetricsError, match=f"cannot read http://127.0.0.1:{port}/metrics"):
        metrics.fetch(f"http://127.0.0.1:{port}")
