"""Logs as people paste them (issue 10's classes of miss), each from lines made up for the test with the shape
vLLM / PyTorch print: graph-capture OOMs, traceback code lines, trailing tracebacks, colour codes as text,
per-worker KV lines, wrapped messages, the V0 profiling line, missing Python modules; and which kinds a
restart would repeat."""

from __future__ import annotations

from backend.logparse import FAILURE_KINDS, PERMANENT_KINDS, LogParser, format_summary, is_permanent, parse_lines


def run(*lines: str) -> LogParser:
    p = LogParser()
    for ln in lines:
        p.feed(ln)
    return p


def fail(p: LogParser) -> dict:
    f = p.snapshot()["failure"]
    assert f is not None and f["kind"] in FAILURE_KINDS
    return f


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of "
       "23.54 GiB of which 41.25 MiB is free. Including non-PyTorch memory, this process has 23.49 GiB memory in use.")


# --- 1. an OOM inside CUDA-graph capture ----------------------------------------------------------

def test_oom_in_torch_graph_capture_frames_is_a_runtime_oom_fixed_by_eager():
    p = run("Traceback (most recent call last):",
            '  File "/srv/env/lib/python3.11/site-packages/torch/cuda/graphs.py", line 84, in capture_end',
            "    super().capture_end()",
            OOM)
    f = fail(p)
    assert f["kind"] == "oom_runtime"
    assert f["fix"].startswith("CUDA graph capture ran out of memory (tried to allocate 64.00 MiB")
    assert "set server.enforce_eager = true" in f["fix"] and "server.gpu_memory_utilization" in f["fix"]
    assert f["message"].startswith("torch.OutOfMemoryError")


def test_oom_after_capture_lines_is_a_graph_oom_even_after_the_failure_wrapper():
    tag = "(EngineCore_DP0 pid=4242) "
    p = run(tag + "INFO 03-02 11:20:01 [gpu_model_runner.py:2000] Model loading took 13.99 GiB and 5.1 seconds",
            tag + "INFO 03-02 11:20:05 [kv_cache_utils.py:1000] GPU KV cache size: 40,112 tokens",
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  31%|███       | 21/67 [00:02<00:05,  8.11it/s]",
            tag + "ERROR 03-02 11:20:09 [core.py:700] EngineCore failed to start.",
            tag + "ERROR 03-02 11:20:09 [core.py:700] Traceback (most recent call last):",
            tag + 'ERROR 03-02 11:20:09 [core.py:700]   File "/srv/vllm/v1/engine/core.py", line 690, in run_engine_core',
            tag + "ERROR 03-02 11:20:09 [core.py:700]     engine_core = EngineCoreProc(*args, **kwargs)",
            tag + "ERROR 03-02 11:20:09 [core.py:700] " + OOM)
    f = fail(p)
    assert f["kind"] == "oom_runtime" and f["fix"].startswith("CUDA graph capture ran out of memory")
    assert p.figures["cuda_graph_count"] == 21


def test_oom_while_loading_needs_evidence_and_is_a_permanent_kind():
    p = run("INFO 03-02 11:19:00 [gpu_model_runner.py:1] Starting to load model /m/qwen...", OOM)
    assert fail(p)["kind"] == "oom_loading"
    assert run(OOM).snapshot()["failure"]["kind"] == "oom_unknown"


# --- 2. a traceback's code line is never the message ----------------------------------------------

def test_unindented_paste_takes_the_exception_line_not_the_raise_line():
    p = run('File "/home/u/.local/lib/python3.10/site-packages/huggingface_hub/utils/_validators.py", line 160, '
            "in validate_repo_id",
            "raise HFValidationError(",
            "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
            "'namespace/repo_name': '/data/models//qwen'. Use `repo_type` argument if needed.")
    f = fail(p)
    assert f["kind"] == "model_not_found"
    assert f["message"].startswith("huggingface_hub.errors.HFValidationError: Repo id must be")
    assert "'/data/models//qwen'" in f["fix"]


def test_code_line_with_a_signature_in_it_is_not_matched():
    p = run('  File "/x/vllm/distributed/device_communicators/pynccl_wrapper.py", line 277, in NCCL_CHECK',
            '    raise RuntimeError(f"NCCL error: {error_str}")',
            "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)")
    f = fail(p)
    assert f["kind"] == "nccl_p2p"
    assert f["message"] == "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"


def test_rank_prefixed_frames_and_a_lowercase_exception_name():
    p = run('[rank1]:   File "/x/vllm/distributed/parallel_state.py", line 300, in all_reduce',
            "[rank1]:     torch.distributed.all_reduce(x, group=self.device_group)",
            "[rank1]: ncclUnhandledCudaError: Call to CUDA function failed.")
    assert fail(p)["message"] == "ncclUnhandledCudaError: Call to CUDA function failed."


def test_multi_line_code_under_a_frame_is_skipped_until_the_exception():
    p = run('File "/x/vllm/distributed/utils.py", line 90, in check',
            "raise RuntimeError(",
            '    f"NCCL error: {error_str}, "',
            '"see the log")',
            "RuntimeError: the worker went away")
    p.process_exited(1)
    f = fail(p)
    assert f["kind"] == "unknown" and f["message"] == "RuntimeError: the worker went away"


def test_a_frame_hint_reports_the_exception_line_that_ends_its_traceback():
    p = run("Traceback (most recent call last):",
            '  File "/x/vllm/distributed/device_communicators/pynccl.py", line 120, in all_reduce',
            "    self.nccl.ncclAllReduce(buf, out, n)",
            "RuntimeError: Triton Error [CUDA]: invalid argument")
    p.process_exited(1)
    f = fail(p)
    assert f["kind"] == "nccl_p2p" and f["message"] == "RuntimeError: Triton Error [CUDA]: invalid argument"


# --- 3. a log ending in an uncaught traceback -------------------------------------------------------

TRAILING = [
    "(APIServer pid=77) INFO 05-05 09:00:00 [api_server.py:1] vLLM API server version 0.10.1",
    "Traceback (most recent call last):",
    '  File "/usr/local/bin/vllm", line 10, in <module>',
    "    sys.exit(main())",
    '  File "/usr/local/lib/python3.12/site-packages/vllm/transformers_utils/config.py", line 300, in get_config',
    "    config_class = CONFIG_MAPPING[config_dict[\"model_type\"]]",
    "KeyError: 'qwen9_moe'",
]


def test_trailing_uncaught_traceback_is_a_failure_with_its_exception_line():
    p = run(*TRAILING)
    assert p.phase == "starting"  # while the process may still be running: no verdict yet
    p.end_of_log()
    f = fail(p)
    assert p.phase == "failed" and f["kind"] == "unknown" and f["message"] == "KeyError: 'qwen9_moe'"
    assert "uncaught KeyError" in f["fix"]
    assert parse_lines(TRAILING).snapshot()["failure"]["message"] == "KeyError: 'qwen9_moe'"


def test_a_traceback_the_server_got_past_is_not_a_failure_at_the_end():
    p = run(*TRAILING, "INFO 05-05 09:00:09 [gpu_model_runner.py:1] Starting to load model /m/x...")
    p.end_of_log()
    assert p.phase == "loading_weights" and p.snapshot()["failure"] is None


def test_positional_model_message_is_a_bad_argument():
    p = parse_lines(["Traceback (most recent call last):",
                     '  File "/venv/bin/vllm", line 8, in <module>',
                     "    sys.exit(main())",
                     "ValueError: With `vllm serve`, you should provide the model as a positional argument or in a "
                     "config file instead of via the `--model` option."])
    f = fail(p)
    assert f["kind"] == "bad_argument" and "remove --model from server.extra_args" in f["fix"]


# --- 4. colour codes and carriage returns, real or pasted as text -----------------------------------

KV_MSG = ("ValueError: To serve at least one request with the model's max seq len (65536), (12.00 GiB KV cache is "
          "needed, which is larger than the available KV cache memory (7.25 GiB). Based on the available memory, "
          "the estimated maximum model length is 39536. Try increasing `gpu_memory_utilization` or decreasing "
          "`max_model_len` when initializing the engine.")


def test_literal_colour_codes_and_caret_m():
    p = run(f"^[[1;36m(EngineCore_DP0 pid=43065)^[[0;0m ERROR 07-14 02:11:09 [core.py:586] {KV_MSG}^M")
    f = fail(p)
    assert f["kind"] == "kv_cache_too_small" and f["fix"].startswith("set server.max_model_len = 39536")
    assert p.engine == "v1" and not f["message"].endswith("^M")


def test_real_colour_codes_and_carriage_returns():
    p = run(f"\x1b[1;36m(EngineCore_DP0 pid=43065)\x1b[0;0m ERROR 07-14 02:11:09 [core.py:586] {KV_MSG}\r")
    assert fail(p)["fix"].startswith("set server.max_model_len = 39536")


def test_literal_caret_m_separates_tqdm_redraws():
    p = run("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01]^MLoading safetensors "
            "checkpoint shards: 100% Completed | 2/2 [00:02<00:00]^M")
    assert p.figures["shards_loaded"] == 2 and p.phase == "loading_weights"


# --- 5. one KV line per worker -> the minimum -------------------------------------------------------

def test_per_worker_kv_lines_take_the_minimum():
    lines = []
    for tokens, conc in (("238,256", "29.08"), ("237,344", "28.97"), ("238,000", "29.05"), ("237,900", "29.04")):
        lines += [f"(EngineCore_DP0 pid=9) INFO 08-01 12:00:00 [kv_cache_utils.py:716] GPU KV cache size: {tokens} tokens",
                  f"(EngineCore_DP0 pid=9) INFO 08-01 12:00:00 [kv_cache_utils.py:720] Maximum concurrency for 8,192 "
                  f"tokens per request: {conc}x"]
    p = run(*lines)
    s = p.snapshot()
    assert s["kv_cache_tokens"] == 237344 and s["max_concurrency"] == 28.97
    r = p.report()
    assert r["kv_cache_tokens_per_worker"] == [238256, 237344, 238000, 237900]
    assert "237,344 … 238,256 tokens in 4 lines" in format_summary(p)


def test_num_gpu_blocks_gives_the_allocated_cache():
    p = run("(EngineCore_DP0 pid=9) INFO 08-01 12:00:01 [core.py:200] num_gpu_blocks is: 14834")
    assert p.snapshot()["gpu_blocks"] == 14834 and p.snapshot()["kv_cache_tokens"] == 237344


# --- 6. messages wrapped over two lines -----------------------------------------------------------

def test_wrapped_max_len_message_names_the_number():
    p = run("ValueError: User-specified max_model_len (16384) is greater than the derived max_model_len",
            "(max_position_embeddings=8192 or model_max_length=None in model's config.json). This may lead to "
            "incorrect model outputs or CUDA errors.")
    f = fail(p)
    assert f["kind"] == "max_len_exceeds_model"
    assert f["fix"].startswith("set server.max_model_len = 8192 (the model's max_position_embeddings)")
    assert "(max_position_embeddings=8192" in f["message"]


def test_message_wrapped_inside_a_word_and_v0_kv_message():
    p = run("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
            "stored in KV cache (215", "04). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
            "when initializing the engine.")
    assert fail(p)["fix"].startswith("set server.max_model_len = 21504")


def test_a_complete_message_is_not_joined_with_the_next_line():
    p = run("ValueError: User-specified max_model_len (16384) is greater than the derived max_model_len "
            "(max_position_embeddings=8192 or model_max_length=None in model's config.json).",
            "Some unrelated stderr line (max_position_embeddings=1)")
    assert "= 8192" in fail(p)["fix"] and "unrelated" not in fail(p)["message"]


# --- 7. the V0 memory-profiling line ---------------------------------------------------------------

def test_v0_profiling_line_gives_weights_and_the_other_figures_per_gpu():
    p = run("INFO 01-10 08:00:00 worker.py:232] Memory profiling takes 2.10 seconds",
            "INFO 01-10 08:00:00 worker.py:232] the current vLLM instance can use total_gpu_memory (23.64GiB) x "
            "gpu_memory_utilization (0.90) = 21.28GiB",
            "INFO 01-10 08:00:00 worker.py:232] model weights take 7.51GiB; non_torch_memory takes 0.21GiB; "
            "PyTorch activation peak memory takes 1.38GiB; the rest of the memory reserved for KV Cache is 12.18GiB.",
            "(VllmWorkerProcess pid=311) INFO 01-10 08:00:00 worker.py:232] model weights take 7.51GiB; "
            "non_torch_memory takes 0.19GiB; PyTorch activation peak memory takes 0.22GiB; the rest of the memory "
            "reserved for KV Cache is 13.36GiB.")
    s = p.report()
    assert s["weights_gib"] == 7.51 and s["kv_cache_gib"] == 12.18  # the smaller worker's cache binds
    assert s["non_torch_gib"] == 0.21 and s["activation_peak_gib"] == 1.38
    assert s["per_rank"]["activation_peak_gib"] == {"0": 1.38, "1": 0.22}
    assert s["phase"] == "kv_cache" and s["engine"] == "v0"
    assert "activation peak 1.38 GiB" in format_summary(p)


# --- 10. a missing Python module ---------------------------------------------------------------------

def test_missing_module_names_it_and_the_servers_interpreter():
    p = run("qwen-tui: launch at 2026-03-01 10:00:00.000 (unix 1772359200.000) pid 50 argv: "
            "/srv/venv/bin/vllm serve /m/qwen --port 8000",
            "ModuleNotFoundError: No module named 'numba'")
    f = fail(p)
    assert f["kind"] == "missing_python_module"
    assert "`/srv/venv/bin/python -m pip install numba`" in f["fix"] and "'numba'" in f["fix"]
    assert is_permanent("missing_python_module")


def test_missing_module_without_a_marker_and_a_broken_vllm():
    f = fail(run("ModuleNotFoundError: No module named 'cv2'"))
    assert "pip install opencv-python-headless" in f["fix"] and "console.vllm_python" in f["fix"]
    f = fail(run("ModuleNotFoundError: No module named 'vllm._C'"))
    assert "reinstall vllm" in f["fix"]


# --- which kinds a restart repeats -------------------------------------------------------------------

def test_permanent_kinds():
    assert {"no_cache_memory", "kv_cache_too_small", "max_len_exceeds_model", "bad_argument", "model_not_found",
            "missing_cuda_library", "missing_python_module", "oom_loading", "bf16_unsupported",
            "weights_incomplete", "tp_indivisible"} <= PERMANENT_KINDS
    for kind in ("port_in_use", "engine_dead", "memory_in_use", "unknown"):
        assert not is_permanent(kind) and not is_permanent(kind, was_ready=True)
    assert is_permanent("oom_runtime") and not is_permanent("oom_runtime", was_ready=True)
    assert is_permanent("nccl_p2p") and not is_permanent("nccl_p2p", was_ready=True)
    assert not is_permanent(None)
    assert PERMANENT_KINDS <= set(FAILURE_KINDS)


def test_parser_says_whether_its_failure_is_permanent():
    p = run("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.")
    assert p.failure_is_permanent() is True and p.report()["failure_permanent"] is True
    assert run("INFO:     Application startup complete.").failure_is_permanent() is None


# --- wraps, quote markers, prefixes on their own line (issue 27) ----------------------------------

def test_hard_wrap_inside_a_number_or_a_unit():
    p = run("(EngineCore pid=1) INFO 12-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 529,8", "56 tokens")
    assert p.figures["kv_cache_tokens"] == 529_856
    p = run("(EngineCore pid=1) INFO 12-01 10:00:00 [gpu_worker.py:440] Available KV cache memory: 97.02 Gi", "B")
    assert p.figures["kv_cache_gib"] == 97.02
    p = run("(Worker_TP1 pid=7) INFO 12-02 02:12:25 [cpu_worker.py:260] Auto set (1.02/9.09) GiB for KV cache on "
            "node 0, with 1.72 GiB requested memory for the worker. 0.", "7 GiB memory was consumed by non-kv usages.")
    assert p.rank_figures["non_kv_gib"] == {1: 0.7}


def test_wrap_at_a_space_that_the_paste_dropped():
    p = run("(EngineCore pid=1) INFO 12-01 10:00:00 [gpu_worker.py:440] Available KV cache memory:", "97.02 GiB")
    assert p.figures["kv_cache_gib"] == 97.02


def test_a_wrap_never_takes_a_number_from_an_unrelated_line():
    p = run("(EngineCore pid=1) INFO 12-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 529,856 tokens",
            "56 tokens later something else")
    assert p.figures["kv_cache_tokens"] == 529_856


def test_github_quote_markers_and_a_message_below_its_prefix():
    p = run("> (EngineCore pid=1) INFO 12-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 529,856 tokens",
            "> (EngineCore pid=1) INFO 12-01 10:00:00 [gpu_worker.py:440] Available KV cache memory: 97.02 GiB")
    assert p.figures["kv_cache_tokens"] == 529_856 and p.figures["kv_cache_gib"] == 97.02
    p = run("(EngineCore pid=1) INFO 12-01 10:00:00 [gpu_worker.py:440]", "Available KV cache memory: 97.02 GiB")
    assert p.figures["kv_cache_gib"] == 97.02


def test_compose_and_journald_prefixes_with_colour_codes():
    line = "\x1b[1;36m(EngineCore pid=1)\x1b[0;0m INFO 12-01 10:00:00 [gpu_worker.py:440] Available KV cache memory: 97.02 GiB"
    for prefix in ("vllm-1  | ", "Dec 02 10:00:00 host vllm[123]: ", ""):
        assert run(prefix + line).figures["kv_cache_gib"] == 97.02, prefix
