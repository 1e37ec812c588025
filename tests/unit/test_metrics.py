"""backend.metrics on real /metrics text captured from vLLM CPU 0.32 (tests/fixtures/metrics)."""

from __future__ import annotations

import pytest

from backend import metrics
from tests.helpers import FIXTURES

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


def test_the_reader_keeps_one_client_for_all_its_reads() -> None:
    """A new httpx client per poll (its TLS context) was ~15 % of an idle console's CPU.
    FAKE server: httpx.MockTransport answering the real captured /metrics text."""
    import httpx

    seen = []
    transport = httpx.MockTransport(lambda req: seen.append(req) or httpx.Response(200, text=AFTER))
    reader = metrics.MetricsReader(api_key="k", transport=transport)
    for _ in range(5):
        assert reader.fetch("http://127.0.0.1:9").generation_tokens == 56.0
    assert len(seen) == 5 and reader.clients_made == 1
    assert seen[0].headers["authorization"] == "Bearer k"
    reader.close()


async def test_the_console_polls_metrics_through_one_client(qhome, monkeypatch) -> None:
    import socket

    from backend import httpclient
    from backend.server.client import Poll
    from tests.helpers.console import app_with, wait_until
    from tui.widgets.metrics_panel import MetricsPanel

    made = []
    real = httpclient.sync_client
    monkeypatch.setattr(httpclient, "sync_client", lambda *a, **kw: made.append(1) or real(*a, **kw))
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    state = {"state": "ready", "base_url": f"http://127.0.0.1:{port}", "served_model_name": "m"}
    app, _ = app_with([Poll(state=state)], qhome, "console.metrics_interval_s=0.05")
    reads = []
    async with app.run_test(size=(150, 45)) as pilot:
        panel = app.screen.query_one(MetricsPanel)
        real_show = panel.show
        panel.show = lambda *a, **kw: reads.append(1) or real_show(*a, **kw)
        assert await wait_until(pilot, lambda: len(reads) >= 4)
    assert len(made) == 1


def test_the_fast_reader_sums_like_prometheus_client() -> None:
    for text in (IDLE, AFTER):
        full = metrics.samples(text)
        fast = metrics.wanted_samples(text)
        assert fast and all(fast[k] == pytest.approx(full[k]) for k in fast)
        assert set(fast) == {n for names in metrics.NAMES.values() for n in names if n in full}
