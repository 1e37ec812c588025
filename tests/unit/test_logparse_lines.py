"""Line families, one at a time, with the exact wording of each vLLM version (see the log-format notes),
plus the line envelope: process tags, ANSI colours, carriage returns, interleaved TP ranks, garbage."""

from __future__ import annotations

import dataclasses
import random

import pytest

from backend.logparse import Failure, Figure, LogParser, Milestone, parse_lines


def feed_all(*lines: str, parser: LogParser | None = None) -> LogParser:
    p = parser or LogParser()
    for ln in lines:
        p.feed(ln)
    return p


# --- versions and engine ---------------------------------------------------------------------------

def test_version_api_server_line_without_brackets():
    p = feed_all("INFO 02-27 19:31:24 api_server.py:912] vLLM API server version 0.7.3")
    assert p.snapshot()["vllm_version"] == "0.7.3"
    assert p.engine == "v0"  # weak: inferred from the version (< 0.8)


def test_version_bracketed_and_engine_from_init_line():
    p = feed_all(
        "INFO 04-23 14:42:26 [api_server.py:1043] vLLM API server version 0.8.5.dev169+gce17db808.d20250423",
        "INFO 04-23 14:42:34 [llm_engine.py:243] Initializing a V0 LLM engine (v0.8.5.dev169+gce17db808.d20250423) "
        "with config: model='/models/QwQ', max_seq_len=60000, tensor_parallel_size=1, kv_cache_dtype=auto, "
        "dtype=torch.bfloat16",
    )
    s = p.snapshot()
    assert s["vllm_version"] == "0.8.5.dev169+gce17db808.d20250423"
    assert s["engine"] == "v0"  # the explicit "V0 LLM engine" beats the version's default (V1 from 0.8)
    assert p.info["max_model_len"] == 60000 and p.info["dtype"] == "bfloat16" and p.info["model"] == "/models/QwQ"


def test_version_from_logo_and_one_line_banner():
    logo = [
        "(APIServer pid=1) INFO 06-01 09:22:30 [api_utils.py:347] ",
        "(APIServer pid=1) INFO 06-01 09:22:30 [api_utils.py:347]        \u2588     \u2588     \u2588\u2584   \u2584\u2588",
        "(APIServer pid=1) INFO 06-01 09:22:30 [api_utils.py:347]  \u2584\u2584 \u2584\u2588 \u2588     \u2588     "
        "\u2588 \u2580\u2584\u2580 \u2588  version 0.16.0",
        "(APIServer pid=1) INFO 06-01 09:22:30 [api_utils.py:347]   \u2588\u2584\u2588\u2580 \u2588     \u2588     "
        "\u2588     \u2588  model   Qwen/Qwen2.5-7B-Instruct",
    ]
    p = feed_all(*logo)
    assert p.vllm_version == "0.16.0" and p.engine == "v1"
    assert p.figures["model"] == "Qwen/Qwen2.5-7B-Instruct"
    p = feed_all("INFO 06-01 09:22:30 [utils.py:267] vLLM server version 0.20.2, serving model Qwen/Qwen2.5-7B")
    assert p.vllm_version == "0.20.2"


def test_old_engine_init_line_is_v0():
    p = feed_all("INFO 06-01 01:06:21 llm_engine.py:100] Initializing an LLM engine (v0.4.2) with config: "
                 "model='/m', tensor_parallel_size=2, max_seq_len=4096")
    assert (p.vllm_version, p.engine, p.info["tensor_parallel_size"]) == ("0.4.2", "v0", 2)


def test_v1_engine_init_line_and_process_tags_set_engine():
    p = feed_all("(EngineCore_DP0 pid=7) INFO 09-03 16:28:23 [core.py:75] Initializing a V1 LLM engine (v0.10.2) "
                 "with config: model='Qwen/Qwen2.5-0.5B'")
    assert (p.vllm_version, p.engine) == ("0.10.2", "v1")
    assert feed_all("(VllmWorkerProcess pid=11) INFO 02-27 09:58:44 model_runner.py:1434] hello").engine == "v0"
    assert feed_all("(Worker_TP1 pid=11) INFO 02-27 09:58:44 [x.py:1] hello").engine == "v1"


def test_args_namespace_and_non_default_args():
    p = feed_all("INFO 09-09 13:07:37 api_server.py:460] args: Namespace(host=None, port=8000, model='m', "
                 "gpu_memory_utilization=0.85, max_model_len=8192, tensor_parallel_size=2, block_size=16)")
    assert p.info == {"port": 8000, "model": "m", "gpu_memory_utilization": 0.85, "max_model_len": 8192,
                      "tensor_parallel_size": 2, "block_size": 16}
    p = feed_all("(APIServer pid=1) INFO 11-29 08:33:18 [api_utils.py:286] non-default args: {'host': '127.0.0.1', "
                 "'port': 8011, 'model': '/srv/models/tiny', 'max_model_len': 2048, 'gpu_memory_utilization': 0.2}")
    assert p.info == {"host": "127.0.0.1", "port": 8011, "model": "/srv/models/tiny", "max_model_len": 2048,
                      "gpu_memory_utilization": 0.2}


# --- weights ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("line,gib,secs", [
    ("INFO 08-26 14:33:37 model_runner.py:890] Loading model weights took 1.9634 GB", 1.9634, None),
    ("INFO 03-20 23:21:00 [gpu_model_runner.py:1140] Model loading took 15.2299 GB and 10.512345 seconds",
     15.2299, 10.512345),
    ("INFO 05-23 09:31:24 [gpu_model_runner.py:1347] Model loading took 18.1450 GiB and 40.766484 seconds",
     18.145, 40.766484),
    ("(EngineCore_DP0 pid=5) INFO 11-01 10:00:00 [gpu_model_runner.py:3550] Model loading took 14.2500 GiB memory "
     "and 31.657031 seconds", 14.25, 31.657031),
    ("(Worker_TP0 pid=34322) INFO 05-06 20:59:59 [gpu_model_runner.py:4879] Model loading took 12.66 GiB memory "
     "and 31.657031 seconds", 12.66, 31.657031),
])
def test_weights_lines(line, gib, secs):
    p = LogParser()
    events = p.feed(line)
    s = p.snapshot()
    assert (s["weights_gib"], s["weights_seconds"], s["phase"]) == (gib, secs, "profiling")
    assert Figure("weights_gib", gib, 0) in events
    assert Milestone("profiling", p.timeline[-1].t) in events


def test_weights_read_time_then_model_loading():
    p = feed_all("INFO 05-23 09:31:22 [loader.py:458] Loading weights took 38.52 seconds")
    assert (p.phase, p.snapshot()["weights_seconds"]) == ("loading_weights", 38.52)
    feed_all("INFO 05-23 09:31:24 [gpu_model_runner.py:1347] Model loading took 18.1450 GiB and 40.766484 seconds",
             parser=p)
    assert p.snapshot()["weights_seconds"] == 40.766484 and p.figures["weights_read_seconds"] == 38.52


def test_shard_bar_with_carriage_returns_and_prefix():
    p = LogParser()
    p.feed("(EngineCore pid=9011) \rLoading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]"
           "\rLoading safetensors checkpoint shards:  25% Completed | 1/4 [00:02<00:06,  2.1s/it]\r")
    assert (p.figures["shards_loaded"], p.figures["shards_total"], p.phase) == (1, 4, "loading_weights")
    p.feed("\rLoading safetensors checkpoint shards (eager): 100% Completed | 4/4 [00:08<00:00,  2.0s/it]\r\n")
    assert p.figures["shards_loaded"] == 4


# --- memory profiling and KV cache ------------------------------------------------------------------

def test_log_line_and_bar_redraw_in_one_chunk():
    p = LogParser()
    p.feed("INFO 05-23 09:31:22 [loader.py:458] Loading weights took 38.52 seconds\r"
           "Capturing CUDA graphs (decode, FULL):  10%|\u2588   | 5/51 [00:01<00:09]\r")
    assert p.figures["weights_read_seconds"] == 38.52 and p.phase == "cuda_graphs"


def test_access_log_lines_are_skipped_cheaply():
    p = feed_all("INFO:     127.0.0.1:35340 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
                 "INFO:     172.17.0.1:48732 - \"GET /health HTTP/1.1\" 500 Internal Server Error")
    assert p.snapshot() == feed_all().snapshot() and p.figures == {}


def test_v064_one_line_memory_profile():
    p = feed_all("INFO 12-02 10:00:00 worker.py:233] Memory profiling results: total_gpu_memory=23.58GiB "
                 "initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB "
                 "non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90")
    assert (p.snapshot()["kv_cache_gib"], p.info["gpu_memory_utilization"], p.phase) == (3.81, 0.9, "kv_cache")


def test_v066_three_line_memory_profile_block():
    block = ("INFO 02-27 19:32:00 worker.py:295] Memory profiling takes 1.73 seconds\r\n"
             "INFO 02-27 19:32:00 worker.py:295] the current vLLM instance can use total_gpu_memory (47.50GiB) x "
             "gpu_memory_utilization (0.78) = 37.18GiB\r\n"
             "INFO 02-27 19:32:00 worker.py:295] model weights take 0.52GiB; non_torch_memory takes 0.08GiB; "
             "PyTorch activation peak memory takes 1.78GiB; the rest of the memory reserved for KV Cache is 34.81GiB.")
    p = LogParser()
    p.feed(block)  # a chunk with several lines
    assert p.snapshot()["kv_cache_gib"] == 34.81
    assert p.figures["total_gpu_gib"] == 47.5 and p.info["gpu_memory_utilization"] == 0.78


@pytest.mark.parametrize("line,blocks,cpu,engine", [
    ("INFO 11-20 10:00:00 gpu_executor.py:122] # GPU blocks: 1478, # CPU blocks: 2048", 1478, 2048, "v0"),
    ("INFO 01-20 10:00:00 executor_base.py:110] # CUDA blocks: 5519, # CPU blocks: 9362", 5519, 9362, "v0"),
    ("INFO 02-27 10:00:00 executor_base.py:113] # cuda blocks: 190100, # CPU blocks: 0", 190100, 0, "v0"),
    ("INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381", 1381, None, "v1"),
])
def test_block_lines(line, blocks, cpu, engine):
    p = feed_all(line)
    s = p.snapshot()
    assert (s["gpu_blocks"], s["kv_cache_tokens"], p.figures.get("cpu_blocks"), s["engine"]) == \
        (blocks, blocks * 16, cpu, engine)


def test_block_size_from_args_multiplies_blocks():
    p = feed_all("INFO 09-09 13:07:37 api_server.py:460] args: Namespace(block_size=32, port=8000)",
                 "INFO 09-09 13:09:00 gpu_executor.py:122] # GPU blocks: 1000, # CPU blocks: 2048")
    assert p.snapshot()["kv_cache_tokens"] == 32000


def test_v1_kv_lines_with_thousands_separators():
    p = feed_all(
        "(Worker_TP0 pid=159) INFO 06-01 10:00:00 [gpu_worker.py:563] Available KV cache memory: 13.1 GiB",
        "(EngineCore pid=140) INFO 06-01 10:00:00 [kv_cache_utils.py:1316] GPU KV cache size: 245,360 tokens",
        "(EngineCore pid=140) INFO 06-01 10:00:00 [kv_cache_utils.py:1320] Maximum concurrency for 32,768 tokens "
        "per request: 7.49x",
    )
    s = p.snapshot()
    assert (s["kv_cache_gib"], s["kv_cache_tokens"], s["max_concurrency"], s["max_concurrency_tokens"]) == \
        (13.1, 245360, 7.49, 32768)
    assert s["gpu_blocks"] is None and s["engine"] == "v1" and s["phase"] == "kv_cache"


@pytest.mark.parametrize("pool", ["GPU", "CPU", "GPU + host"])
def test_combined_kv_line_028_plus(pool):
    p = feed_all(f"(EngineCore pid=1) INFO 06-01 10:00:00 [kv_cache_utils.py:1148] {pool} KV cache size: "
                 f"1,309,184 tokens, Maximum concurrency for 2,048 tokens per request: 639.25x")
    s = p.snapshot()
    assert (s["kv_cache_tokens"], s["max_concurrency"], s["max_concurrency_tokens"]) == (1309184, 639.25, 2048)


def test_v0_concurrency_without_comma_and_cpu_auto_set():
    p = feed_all("INFO 02-27 09:58:41 executor_base.py:116] Maximum concurrency for 32768 tokens per request: 10.64x",
                 "(Worker pid=3) INFO 11-29 08:34:50 [cpu_worker.py:260] Auto set (1.25/9.59) GiB for KV cache on "
                 "node 0, with 1.92 GiB requested memory for the worker.")
    s = p.snapshot()
    assert (s["max_concurrency"], s["max_concurrency_tokens"], s["kv_cache_gib"]) == (10.64, 32768, 1.25)


# --- CUDA graphs, compile, init, listen, ready, stats -----------------------------------------------

def test_cuda_graph_lines():
    p = feed_all(
        "INFO 02-27 09:58:44 model_runner.py:1434] Capturing cudagraphs for decoding. This may lead to unexpected "
        "consequences if the model is not static. If you are running out of memory, consider decreasing "
        "`gpu_memory_utilization` or switching to eager mode.",
    )
    assert p.phase == "cuda_graphs" and p.snapshot()["failure"] is None  # "out of memory" in INFO text is no OOM
    feed_all("INFO 02-27 09:59:26 model_runner.py:1562] Graph capturing finished in 42 secs, took 0.52 GiB", parser=p)
    assert p.snapshot()["cuda_graph_seconds"] == 42.0 and p.figures["cuda_graph_gib"] == 0.52
    p = feed_all("INFO 10-12 00:26:58 model_runner.py:1001] Graph capturing finished in 5 secs.")
    assert p.snapshot()["cuda_graph_seconds"] == 5.0
    p = feed_all("Capturing CUDA graphs (decode, FULL): 100%|\u2588\u2588\u2588| 35/35 [00:03<00:00, 10.0it/s]")
    assert p.phase == "cuda_graphs"


def test_compile_and_init_engine_lines():
    p = feed_all(
        "INFO 01-30 03:18:25 backends.py:585] Dynamo bytecode transform time: 12.88 s",
        "INFO 01-30 03:19:13 monitor.py:31] torch.compile takes 54.73 s in total",
        "INFO 01-30 03:19:40 [core.py:279] init engine (profile, create kv cache, warmup model) took 61.20 seconds",
    )
    assert (p.figures["dynamo_seconds"], p.figures["compile_seconds"], p.snapshot()["init_engine_seconds"]) == \
        (12.88, 54.73, 61.2)
    p = feed_all("(EngineCore pid=1) INFO 06-01 10:00:00 [core.py:300] init engine (profile, create kv cache, warmup "
                 "model) took 47.33 s (compilation: 12.10 s)",
                 "(EngineCore pid=1) INFO 06-01 10:00:00 [monitor.py:20] torch.compile took 12.10 s in total")
    assert (p.snapshot()["init_engine_seconds"], p.figures["compile_seconds"]) == (47.33, 12.1)


@pytest.mark.parametrize("line,url", [
    ("INFO 02-27 19:33:00 api_server.py:958] Starting vLLM API server on http://0.0.0.0:8000", "http://0.0.0.0:8000"),
    ("(APIServer pid=1) INFO 09-03 16:30:00 [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000",
     "http://0.0.0.0:8000"),
    ("(APIServer pid=1) INFO 11-29 08:34:54 [entry.py:140] Starting vLLM server on http://127.0.0.1:8011",
     "http://127.0.0.1:8011"),
    ("INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)", "http://0.0.0.0:8000"),
    ("INFO:     Uvicorn running on socket ('0.0.0.0', 8000) (Press CTRL+C to quit)", "http://0.0.0.0:8000"),
])
def test_listen_lines(line, url):
    assert feed_all(line).snapshot()["listen_url"] == url


def test_ready_and_stats():
    p = feed_all("INFO:     Started server process [60858]", "INFO:     Waiting for application startup.",
                 "INFO:     Application startup complete.")
    s = p.snapshot()
    assert s["ready"] is True and s["phase"] == "ready"
    feed_all("(APIServer pid=1) INFO 06-01 10:01:00 [loggers.py:123] Engine 000: Avg prompt throughput: 120.5 "
             "tokens/s, Avg generation throughput: 33.0 tokens/s, Running: 2 reqs, Waiting: 1 reqs, GPU KV cache "
             "usage: 4.5%, Prefix cache hit rate: 50.0%", parser=p)
    assert (p.figures["prompt_throughput"], p.figures["requests_running"], p.figures["requests_waiting"],
            p.figures["kv_cache_usage_pct"]) == (120.5, 2, 1, 4.5)
    feed_all("INFO 04-23 14:52:34 [metrics.py:489] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
             "9.0 tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 0.1%, CPU KV "
             "cache usage: 0.0%.", parser=p)
    assert (p.figures["generation_throughput"], p.figures["requests_waiting"]) == (9.0, 3)


def test_buildkite_timestamp_prefix():
    p = feed_all("[2024-09-05T00:38:34Z] INFO:     Application startup complete.")
    assert p.phase == "ready"


# --- envelope: ANSI, tags, \r, interleaved ranks -----------------------------------------------------

def test_ansi_coloured_tag_and_level():
    p = feed_all("\x1b[1;36m(VllmWorkerProcess pid=123)\x1b[0;0m INFO 02-27 09:58:40 model_runner.py:1115] "
                 "Loading model weights took 7.1000 GB",
                 "\x1b[32mINFO\x1b[0m \x1b[90m06-01 09:22:30\x1b[0m \x1b[90m[kv_cache_utils.py:1316]\x1b[0m "
                 "GPU KV cache size: 245,360 tokens")
    s = p.snapshot()
    assert (s["weights_gib"], s["kv_cache_tokens"]) == (7.1, 245360)
    assert p.timeline[-1].t is not None  # the timestamp was read through the colour codes


def test_timestamp_from_log_header_and_caller_clock():
    p = LogParser(year=2025)
    ev = p.feed("INFO 06-01 10:00:00 [x.py:1] Starting to load model Qwen...")
    assert ev[0] == Milestone("starting", 1748772000.0)
    ev = p.feed("INFO 06-01 10:00:30 [gpu_model_runner.py:1] Model loading took 1.0 GiB and 29.5 seconds")
    assert Milestone("profiling", 1748772030.0) in ev
    assert [d for _, _, d in p.phase_durations()][:2] == [0.0, 30.0]
    p = LogParser()
    p.feed("Starting to load model x", t=100.0)
    p.feed("INFO 06-01 10:00:30 [gpu_model_runner.py:1] Model loading took 1.0 GiB and 29.5 seconds", t=130.5)
    assert [(m.phase, m.t) for m in p.timeline] == [("starting", 100.0), ("loading_weights", 100.0),
                                                     ("profiling", 130.5)]


def test_year_rollover_keeps_time_monotonic():
    p = LogParser(year=2025)
    p.feed("INFO 12-31 23:59:50 [x.py:1] Starting to load model q")
    p.feed("INFO 01-01 00:00:10 [gpu_model_runner.py:1] Model loading took 1.0 GiB and 20 seconds")
    assert p.phase_durations()[1][2] == 20.0


@pytest.mark.parametrize("tag,rank", [
    ("(VllmWorker rank=1 pid=86)", 1), ("(VllmWorker TP1 pid=3)", 1), ("(Worker_TP1 pid=3)", 1),
    ("(Worker pid=3)", 0), ("(VllmWorker-0 pid=3)", 0), ("(EngineCore_DP0 pid=3)", 0), ("(APIServer pid=3)", 0),
    ("(RayWorkerWrapper pid=206994, ip=192.168.10.25)", 1), ("(VllmWorkerProcess pid=11055)", 1),
])
def test_rank_of_process_tags(tag, rank):
    p = LogParser()
    ev = p.feed(f"{tag} INFO 02-27 09:58:40 [gpu_model_runner.py:1] Model loading took 7.1 GiB and 9.0 seconds")
    assert Figure("weights_gib", 7.1, rank) in ev


def test_pipeline_parallel_rank_uses_tp_size():
    p = feed_all("INFO 09-09 13:07:37 api_server.py:460] args: Namespace(tensor_parallel_size=2)")
    ev = p.feed("(Worker_PP1_TP0 pid=9) INFO 02-27 09:58:40 [gpu_model_runner.py:1] Model loading took 7.1 GiB "
                "and 9.0 seconds")
    assert Figure("weights_gib", 7.1, 2) in ev


def test_interleaved_tp_workers_keep_per_rank_figures():
    lines = [
        "(Worker_TP0 pid=159) INFO 06-01 10:00:00 [default_loader.py:384] Loading weights took 24.84 seconds",
        "(Worker_TP1 pid=160) INFO 06-01 10:00:00 [default_loader.py:384] Loading weights took 25.10 seconds",
        "(Worker_TP1 pid=160) INFO 06-01 10:00:01 [gpu_model_runner.py:4879] Model loading took 7.13 GiB memory "
        "and 26.2 seconds",
        "(Worker_TP0 pid=159) INFO 06-01 10:00:01 [gpu_model_runner.py:4879] Model loading took 7.10 GiB memory "
        "and 25.9 seconds",
        "(Worker_TP0 pid=159) INFO 06-01 10:00:20 [gpu_worker.py:563] Available KV cache memory: 11.15 GiB",
        "(Worker_TP1 pid=160) INFO 06-01 10:00:20 [gpu_worker.py:563] Available KV cache memory: 10.9 GiB",
        "(EngineCore pid=140) INFO 06-01 10:00:20 [kv_cache_utils.py:2235] GPU KV cache size: 214,135 tokens",
    ]
    p = feed_all(*lines)
    s = p.snapshot()
    # the figure that binds: the largest weights, the slowest load, the smallest KV cache
    assert (s["weights_gib"], s["weights_seconds"], s["kv_cache_gib"], s["kv_cache_tokens"]) == \
        (7.13, 26.2, 10.9, 214135)
    pr = p.per_rank
    assert pr["weights_gib"] == {0: 7.10, 1: 7.13}
    assert pr["kv_cache_gib"] == {0: 11.15, 1: 10.9}
    assert pr["weights_read_seconds"] == {0: 24.84, 1: 25.10}
    assert [m.phase for m in p.timeline] == ["starting", "loading_weights", "profiling", "kv_cache"]


def test_equal_per_rank_figures_are_not_reported_as_differing():
    p = feed_all("(Worker_TP0 pid=1) INFO 06-01 10:00:01 [gpu_model_runner.py:1] Model loading took 7.1 GiB and 9 s",
                 "(Worker_TP1 pid=2) INFO 06-01 10:00:01 [gpu_model_runner.py:1] Model loading took 7.1 GiB and 9 s")
    assert p.per_rank == {}
    assert p.rank_figures["weights_gib"] == {0: 7.1, 1: 7.1}


def test_interleaved_tracebacks_from_two_ranks():
    lines = [
        "(VllmWorker rank=0 pid=85) ERROR 03-20 23:26:06 [multiproc_executor.py:375] Traceback (most recent call last):",
        "(VllmWorker rank=1 pid=86) ERROR 03-20 23:26:06 [multiproc_executor.py:375] Traceback (most recent call last):",
        '(VllmWorker rank=0 pid=85) ERROR 03-20 23:26:06 [multiproc_executor.py:375]   File "/v/worker/gpu_worker.py", '
        "line 1, in determine_available_memory",
        '(VllmWorker rank=1 pid=86) ERROR 03-20 23:26:06 [multiproc_executor.py:375]   File "/v/worker/gpu_worker.py", '
        "line 1, in determine_available_memory",
        "(VllmWorker rank=0 pid=85) ERROR 03-20 23:26:06 [multiproc_executor.py:375]     raise OutOfMemoryError(msg)",
        "(VllmWorker rank=1 pid=86) ERROR 03-20 23:26:06 [multiproc_executor.py:375] torch.OutOfMemoryError: CUDA out "
        "of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 23.57 GiB of which 1.2 GiB is free.",
        "(VllmWorker rank=0 pid=85) ERROR 03-20 23:26:06 [multiproc_executor.py:375] torch.OutOfMemoryError: CUDA out "
        "of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.57 GiB of which 1.1 GiB is free.",
    ]
    p = LogParser()
    p.feed("INFO 03-20 23:25:00 [gpu_model_runner.py:1] Model loading took 7.1 GiB and 9.0 seconds")
    events = [e for ln in lines for e in p.feed(ln)]
    failures = [e for e in events if isinstance(e, Failure)]
    assert len(failures) == 1  # the first diagnosis is reported once; the second rank repeats it
    assert failures[0].kind == "oom_runtime"
    assert failures[0].message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1")
    assert "the profiling forward pass" in failures[0].fix


def test_prefix_only_line_and_empty_lines():
    p = feed_all("(Worker_TP0 pid=34322) ", "", "   ", "\r", "\r\n")
    assert p.snapshot()["phase"] == "starting" and p.bad_lines == 0


# --- robustness ---------------------------------------------------------------------------------------

def test_garbage_never_raises():
    rnd = random.Random(1234)
    p = LogParser()
    alphabet = "()[]:\r\n\x1b\x00 INFOWARNERROR#-|%/\\\u2588\u00e9abc0123456789.,'\"=pid"
    samples = [b"\xff\xfe\x00\x01", bytearray(b"\x1b[31mINFO"), None, 12345, 3.5, object(), "(", "[", "INFO",
               "INFO 99-99 99:99:99 [x.py:1] Model loading took x GiB and y seconds", "\x1b[", "\x1b]0;title\x07",
               "(VllmWorker rank=99999999999999999999 pid=1) INFO 01-01 00:00:00 [a:1] hi",
               "ERROR 13-45 25:61:61 [core.py:1] EngineCore failed to start.", "x" * 200_000,
               "Traceback (most recent call last):", "ValueError: ", ": error: ", "Maximum concurrency for , tokens"]
    for s in samples:
        assert isinstance(p.feed(s), list)
    for _ in range(3000):
        line = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 120)))
        assert isinstance(p.feed(line), list)
        assert isinstance(p.feed(line.encode("utf-8", "replace") + bytes([rnd.randint(0, 255)])), list)
    assert isinstance(p.snapshot(), dict)
    assert p.bad_lines == 0  # nothing even reached the safety net


def test_events_are_frozen_and_parse_lines_strips_newlines():
    p = parse_lines(["INFO:     Application startup complete.\n"])
    assert p.phase == "ready"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.timeline[0].phase = "x"  # type: ignore[misc]
    assert Failure("unknown", "m", "f").as_dict() == {"kind": "unknown", "message": "m", "fix": "f"}


def test_state_property_is_the_snapshot():
    p = feed_all("INFO:     Application startup complete.")
    assert p.state == p.snapshot()


def test_human_summary_shows_per_rank_figures_and_timeline():
    from backend.logparse import format_summary
    p = LogParser(year=2025)
    feed_all(
        "(Worker_TP0 pid=1) INFO 06-01 10:00:00 [gpu_model_runner.py:1] Starting to load model Qwen/Qwen2.5-7B...",
        "(Worker_TP0 pid=1) INFO 06-01 10:00:30 [gpu_worker.py:563] Available KV cache memory: 11.15 GiB",
        "(Worker_TP1 pid=2) INFO 06-01 10:00:30 [gpu_worker.py:563] Available KV cache memory: 10.9 GiB",
        "(APIServer pid=3) INFO 06-01 10:01:40 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
        "INFO:     Application startup complete.", parser=p)
    text = format_summary(p)
    assert "phase: ready" in text and "listening on http://0.0.0.0:8000" in text
    assert "kv_cache_gib per rank  rank 0: 11.15 · rank 1: 10.9" in text
    assert "KV cache  " in text and "10.9 GiB" in text
    assert "+0 s  starting" in text and "+30 s  kv_cache" in text and "took 1m 10s" in text
