"""Load test: scheduling and aggregation driven by an injected request function (no server at all);
a real refused connection; and one FAKE server (httpx.MockTransport) for the single fault the real
server cannot be made to produce on demand: streams cut mid-reply during the load.
The real vLLM CPU server is measured in test_e2e.py::test_bench_against_the_real_server."""

import asyncio
import io
import json
import socket

import httpx
import pytest

from backend.bench.loadtest import (
    BenchConfig,
    BenchInputError,
    Progress,
    predict,
    prompt_text,
    run_bench,
    run_cli,
    run_requests,
)
from backend.bench.summary import RequestResult, aggregate, burst_notes, capacity_notes, percentile
from backend.settings import load


def ok(i, ttft=0.1, latency=1.0, tokens=10, gaps=(0.01,), tps=9.0, span=None, burst=False):
    return RequestResult(i, ok=True, ttft_s=ttft, latency_s=latency, output_tokens=tokens,
                         prompt_tokens=40, itl_s=list(gaps), decode_tokens_per_s=tps,
                         decode_span_s=sum(gaps) if span is None else span, burst=burst)


def failed(i, error="boom", fix=""):
    return RequestResult(i, error=error, fix=fix)


# -- percentiles and aggregation --------------------------------------------------------------------
def test_percentile_interpolates_like_numpy():
    assert percentile([], 50) is None
    assert percentile([7.0], 99) == 7.0
    xs = [4.0, 1.0, 3.0, 2.0]
    assert percentile(xs, 50) == 2.5
    assert percentile(xs, 90) == pytest.approx(3.7)
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 4.0
    assert percentile(list(range(101)), 99) == pytest.approx(99.0)


def test_aggregate_counts_only_completed_requests():
    results = [ok(0, ttft=0.1, latency=1.0, tokens=10, gaps=(0.01, 0.03), tps=10.0),
               ok(1, ttft=0.3, latency=2.0, tokens=20, gaps=(0.02,), tps=20.0),
               failed(2, "404: no such model", "use the served name"),
               failed(3, "404: no such model", "use the served name"),
               failed(4, "cut mid-reply")]
    rep = aggregate(results, wall_s=2.0)
    assert rep["completed"] == 2 and rep["failed"] == 3
    assert rep["errors"] == ["404: no such model (fix: use the served name)", "cut mid-reply"]
    assert rep["output_tokens"] == 30 and rep["output_tokens_per_s"] == 15.0
    assert rep["requests_per_s"] == 1.0 and rep["wall_s"] == 2.0
    assert {k: rep["ttft_ms"][k] for k in ("p50", "p90", "p99", "max")} == {"p50": 200.0, "p90": 280.0,
                                                                          "p99": 298.0, "max": 300.0}
    assert rep["ttft_ms"]["mean"] == 200.0 and rep["ttft_ms"]["median"] == 200.0
    assert rep["itl_ms"]["pooled_mean"] == 20.0 and rep["itl_ms"]["gaps"] == 3
    # TPOT as vLLM: (latency - TTFT) / (tokens - 1): 0.9 / 9 = 100 ms and 1.7 / 19 = 89.5 ms
    assert rep["tpot_ms"]["mean"] == pytest.approx((100 + 1700 / 19) / 2, abs=0.01)
    assert rep["itl_ms"]["p50"] == 20.0 and rep["itl_ms"]["p90"] == 28.0  # pooled gaps 10, 20, 30 ms
    assert rep["itl_ms"]["mean"] == pytest.approx((40 / 9 + 20 / 19) / 2, abs=0.01)  # span / (tokens - 1)
    assert rep["latency_s"]["p50"] == 1.5
    assert rep["decode_tokens_per_s_per_request"]["p50"] == 15.0
    assert rep["prompt_tokens"] == 40


def test_aggregate_keeps_at_most_five_distinct_errors():
    rep = aggregate([failed(i, f"error {i % 7}") for i in range(20)], wall_s=1.0)
    assert rep["completed"] == 0 and rep["failed"] == 20
    assert rep["errors"] == [f"error {i}" for i in range(5)]
    assert rep["ttft_ms"]["p50"] is None and rep["output_tokens_per_s"] == 0.0


def test_itl_mean_counts_tokens_not_deltas():
    """Four tokens in three deltas (two reached the client together): 30 ms over 3 token gaps."""
    r = ok(0, tokens=4, gaps=(0.0, 0.03))
    assert r.itl_mean_s == pytest.approx(0.01)
    assert RequestResult(1).itl_mean_s is None and ok(2, tokens=1, gaps=()).itl_mean_s is None


# -- scheduling --------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,c", [(20, 4), (5, 8), (7, 1)])
async def test_never_more_than_c_in_flight_and_every_request_once(n, c):
    in_flight, peak, seen, progress = 0, 0, [], []

    async def request(i):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        seen.append(i)
        await asyncio.sleep(0.001 * (i % 3))
        in_flight -= 1
        return ok(i)

    results, wall = await run_requests(request, n, c, progress.append)
    assert sorted(seen) == list(range(n)) and [r.index for r in results] == list(range(n))
    assert peak == min(n, c)
    assert all(p.in_flight <= c for p in progress)
    assert progress[-1] == Progress(completed=n, failed=0, in_flight=0, total=n)
    assert wall > 0


async def test_keeps_c_in_flight_until_the_tail():
    """A slow request does not hold back the others: a free slot takes the next index at once."""
    started, when_0_ended = [], []

    async def request(i):
        started.append(i)
        await asyncio.sleep(0.2 if i == 0 else 0.001)
        if i == 0:
            when_0_ended.append(len(started))
        return ok(i)

    await run_requests(request, 10, 2)
    assert when_0_ended == [10]  # the other slot ran requests 1..9 meanwhile


async def test_a_request_that_raises_is_a_failure_and_a_bad_callback_is_ignored():
    async def request(i):
        if i == 1:
            raise RuntimeError("exploded")
        return ok(i)

    def callback(p):
        raise ValueError("display broke")

    results, _ = await run_requests(request, 3, 2, callback)
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error == "RuntimeError: exploded"


# -- prediction --------------------------------------------------------------------------------------
def test_prediction_prefers_the_running_servers_figures(qhome, repo_config):
    s = load(config=str(repo_config))
    plan = {"max_concurrency": 8.96, "kv_cache_tokens": 73408, "decode_tokens_per_s_ceiling": 63.1,
            "max_model_len": 8192, "max_num_seqs": 16}
    live = {"state": "ready", "base_url": s.base_url, "max_concurrency": 9.5, "kv_cache_tokens": 77824}
    p = predict(s, live, plan)
    assert (p["max_concurrency"], p["kv_cache_tokens"], p["source"]) == (9.5, 77824, "server log")
    assert p["decode_ceiling_tokens_per_s"] == 63.1
    other = dict(live, base_url="http://127.0.0.1:9999")  # a different server is supervised
    assert predict(s, other, plan)["source"] == "plan"
    assert predict(s, dict(live, state="starting"), plan)["max_concurrency"] == 8.96
    assert predict(s, None, None)["source"] is None


def test_capacity_notes():
    pred = {"kv_cache_tokens": 73408, "max_concurrency": 8.96, "max_num_seqs": 16}
    assert capacity_notes(pred, 8, 256) == []
    over_kv = capacity_notes(dict(pred, max_num_seqs=None), 400, 256)
    assert len(over_kv) == 1 and "286 requests of 256 tokens" in over_kv[0] and "preempted" in over_kv[0]
    notes = capacity_notes(pred, 12, 256)
    assert "8.96 full-length" in notes[0]
    notes = capacity_notes(pred, 20, 256)
    assert any("max_num_seqs = 16" in n for n in notes)
    big = capacity_notes({"kv_cache_tokens": 4_231_808, "max_concurrency": None}, 20_000, 2_048)
    assert "the 2,066 requests of 2,048 tokens the KV cache holds (4,231,808 tokens)" in big[0]


def test_bursts_are_flagged():
    bunched = aggregate([ok(i, tokens=10, gaps=(0.0,) * 8 + (0.05,), burst=True) for i in range(3)], 1.0)
    assert "bursts" in burst_notes(bunched)[0]
    # tokens in pairs (half the gaps ~0) still give each request a rate: not a burst
    pairs = aggregate([ok(i, tokens=20, gaps=(0.0, 0.018) * 9 + (0.0,)) for i in range(3)], 1.0)
    assert pairs["itl_ms"]["p50"] < 0.1 and burst_notes(pairs) == []
    assert burst_notes(aggregate([ok(i, tokens=10, gaps=(0.02,) * 9) for i in range(3)], 1.0)) == []
    assert burst_notes(aggregate([], 1.0)) == []


def test_each_prompt_starts_with_its_own_number():
    assert prompt_text(3, 5).startswith("Request 3. ") and len(prompt_text(3, 5).split()) == 7
    assert prompt_text(4, 5)[:10] != prompt_text(3, 5)[:10]


def test_two_runs_never_send_the_same_prompt():
    """A repeated run sent the same prompts: the prefix cache skipped their prefill and TTFT read low."""
    from backend.bench.loadtest import run_tag

    a, b = run_tag(), run_tag()
    assert a != b and prompt_text(3, 5, a)[:16] != prompt_text(3, 5, b)[:16]


async def test_the_prompts_of_two_bench_runs_differ(qhome, repo_config):
    s = load(config=str(repo_config))
    fakes = [FakeServer(), FakeServer()]
    for fake in fakes:
        await run_bench(s, BenchConfig(requests=2, concurrency=1, max_tokens=2, prompt_tokens=30, warmup=False),
                        transport=httpx.MockTransport(fake))
    first = [b["messages"][0]["content"] for b in fakes[0].bodies]
    second = [b["messages"][0]["content"] for b in fakes[1].bodies]
    assert not set(first) & set(second)


# -- arguments and a real refused connection ------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_arguments_exit_2(qhome, repo_config):
    s = load(config=str(repo_config))
    err = io.StringIO()
    assert run_cli(s, BenchConfig(concurrency=0), True, io.StringIO(), err) == 2
    assert "--concurrency" in err.getvalue()
    with pytest.raises(BenchInputError):
        BenchConfig(max_tokens=-1).check()


def test_no_server_says_how_to_start_one(qhome, repo_config):
    s = load(config=str(repo_config), overrides=[f"server.port={free_port()}"])
    out, err = io.StringIO(), io.StringIO()
    assert run_cli(s, BenchConfig(requests=3), True, out, err) == 1
    rep = json.loads(out.getvalue())
    assert rep["completed"] == 0 and rep["failed"] == 0 and "cannot connect" in rep["error"]
    assert "qwen-tui serve" in rep["fix"] and rep["errors"]
    assert rep["predicted"]["kv_cache_tokens"] and rep["server"]["base_url"] == s.base_url
    out, err = io.StringIO(), io.StringIO()
    assert run_cli(s, BenchConfig(requests=3), False, out, err) == 1
    assert "qwen-tui serve" in err.getvalue() and "Traceback" not in err.getvalue()


# -- FAKE server: streams cut mid-reply (the real server cannot be made to do this on demand) -------
class FakeServer:
    """NOT vLLM: answers /v1/models and /tokenize, streams 4 tokens, and cuts every third stream."""

    def __init__(self):
        self.bodies, self.streams = [], 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "qwen2.5-14b", "max_model_len": 100}]})
        if request.url.path == "/tokenize":
            text = json.loads(request.content)["messages"][0]["content"]
            return httpx.Response(200, json={"count": 10 + len(text.split()), "max_model_len": 100})
        body = json.loads(request.content)
        self.bodies.append(body)
        self.streams += 1
        cut = self.streams % 3 == 0
        n = body["max_tokens"]

        class Stream(httpx.AsyncByteStream):
            async def __aiter__(self):
                for _ in range(n):
                    yield b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
                    if cut:
                        raise httpx.RemoteProtocolError("peer closed connection")
                yield (b'data: {"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":%d}}\n\n'
                       b"data: [DONE]\n\n" % n)

        return httpx.Response(200, stream=Stream())


async def test_cut_streams_are_counted_and_explained(qhome, repo_config):
    s = load(config=str(repo_config))
    fake = FakeServer()
    seen = []
    rep = await run_bench(s, BenchConfig(requests=8, concurrency=3, max_tokens=200, prompt_tokens=30,
                                         warmup=False), seen.append, transport=httpx.MockTransport(fake))
    # the prompt was sized with /tokenize (10 template tokens + 2 for "Request N." + words) and
    # max_tokens lowered to fit the server's max_model_len of 100
    assert rep["max_tokens"] == 70 and any("max_tokens lowered" in n for n in rep["notes"])
    assert all(b["ignore_eos"] is True and b["stream_options"] == {"include_usage": True} for b in fake.bodies)
    assert rep["completed"] == 6 and rep["failed"] == 2
    assert rep["output_tokens"] == 6 * 70
    assert len(rep["errors"]) == 1 and "cut mid-reply" in rep["errors"][0]
    assert seen[-1].done == 8 and max(p.in_flight for p in seen) <= 3


class FakeSilentTokenizerServer(FakeServer):
    """NOT vLLM: streams like vLLM with a tokenizer whose ids decode to nothing (role chunk, empty
    deltas, usage at the end), or, with `tokens=0`, a stream with no chunk at all."""

    def __init__(self, tokens=None):
        super().__init__()
        self.tokens = tokens

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return super().__call__(request)
        n = json.loads(request.content)["max_tokens"] if self.tokens is None else self.tokens
        body = b"" if n == 0 else (
            b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
            + b'data: {"choices":[{"delta":{"content":""}}]}\n\n' * (n - 1)
            + b'data: {"choices":[{"delta":{"content":""},"finish_reason":"length"}]}\n\n')
        body += b'data: {"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":%d}}\n\ndata: [DONE]\n\n' % n
        return httpx.Response(200, content=body)


async def test_tokens_without_text_are_a_success_and_no_token_says_what_to_do(qhome, repo_config):
    """On the H200 the warm-up failed with 'the stream ended without any content' and an empty fix."""
    s = load(config=str(repo_config))
    rep = await run_bench(s, BenchConfig(requests=4, concurrency=2, max_tokens=16, prompt_tokens=30),
                          transport=httpx.MockTransport(FakeSilentTokenizerServer()))
    assert not rep.get("error") and rep["completed"] == 4 and rep["output_tokens"] == 64
    assert rep["ttft_ms"]["mean"] is not None and rep["tpot_ms"]["mean"] is not None
    rep = await run_bench(s, BenchConfig(requests=4, concurrency=2, max_tokens=16, prompt_tokens=30),
                          transport=httpx.MockTransport(FakeSilentTokenizerServer(tokens=0)))
    assert "warm-up" in rep["error"] and "without any token" in rep["error"]
    assert rep["fix"] and "server log" in rep["fix"]


async def test_every_failed_request_has_a_fix(qhome, repo_config):
    s = load(config=str(repo_config))
    rep = await run_bench(s, BenchConfig(requests=6, concurrency=2, max_tokens=4, prompt_tokens=30, warmup=False),
                          transport=httpx.MockTransport(FakeServer()))
    assert rep["failed"] == 2 and all("(fix: " in e for e in rep["errors"])


def test_the_summary_writes_big_counts_with_thousands_separators():
    # the `b` dialog said "1278.2 output tok/s (4096 tokens)" beside "6,652,160 tokens" a line above
    results = [ok(i, ttft=0.1, latency=1.0, tokens=1024, gaps=(0.001,), tps=1024.0) for i in range(4)]
    rep = aggregate(results, wall_s=2.0)
    rep.update(requests=4, concurrency=4, max_tokens=1024, predicted={},
               server={"base_url": "http://127.0.0.1:8011", "model": "m"})
    from backend.bench.summary import summary_lines

    [measured] = [line for line in summary_lines(rep) if line.startswith("measured:")]
    assert "2,048.0 output tok/s (4,096 tokens)" in measured, measured
