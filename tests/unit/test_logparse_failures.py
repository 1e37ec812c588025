"""Each failure kind from synthetic lines with vLLM's (and PyTorch's / NCCL's / argparse's) exact wording,
and what process_exited() makes of the end of a run."""

from __future__ import annotations

import pytest

from backend.logparse import FAILURE_KINDS, Failure, LogParser, Milestone

LOADED = "INFO 06-01 10:00:30 [gpu_model_runner.py:1347] Model loading took 14.2500 GiB and 30.000000 seconds"
READY = "INFO:     Application startup complete."


def run(*lines: str, rc: int | None = None, parser: LogParser | None = None) -> LogParser:
    p = parser or LogParser()
    for ln in lines:
        p.feed(ln)
    if rc is not None:
        p.process_exited(rc)
    return p


def failure(p: LogParser) -> dict:
    f = p.snapshot()["failure"]
    assert f is not None, "expected a failure"
    assert f["kind"] in FAILURE_KINDS
    return f


# --- KV cache ---------------------------------------------------------------------------------------

def test_kv_v1_with_estimate():
    p = run("(EngineCore_DP0 pid=1) ERROR 09-21 10:00:00 [core.py:708] ValueError: To serve at least one request "
            "with the models's max seq len (221000), (10.12 GiB KV cache is needed, which is larger than the "
            "available KV cache memory (5.59 GiB). Based on the available memory, the estimated maximum model length "
            "is 122080. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine.")
    f = failure(p)
    assert f["kind"] == "kv_cache_too_small" and p.phase == "failed"
    assert f["message"].startswith("ValueError: To serve at least one request")
    assert f["fix"].startswith("set server.max_model_len = 122080 (the largest vLLM estimated), or raise "
                               "server.gpu_memory_utilization")
    assert 'server.kv_cache_dtype = "fp8"' in f["fix"]


def test_kv_v1_new_wording_with_fp8_cache_and_utilization():
    p = run("INFO 09-09 13:07:37 [api_utils.py:1] non-default args: {'gpu_memory_utilization': 0.8, "
            "'kv_cache_dtype': 'fp8'}",
            "(EngineCore pid=316) ValueError: To serve at least one request with the model's max seq len (100000), "
            "(4.26 GiB KV cache is needed, which is larger than the available KV cache memory (4.25 GiB). Based on "
            "the available memory, the estimated maximum model length is 99840. Try increasing "
            "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
            "`max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/"
            "conserving_memory/ for more details.")
    f = failure(p)
    assert f["fix"] == ("set server.max_model_len = 99840 (the largest vLLM estimated), or raise "
                        "server.gpu_memory_utilization (now 0.8) to give the KV cache more memory")


def test_kv_v1_085_without_estimate_scales_the_length():
    p = run("ERROR 05-01 10:00:00 [core.py:396] ValueError: To serve at least one request with the models's max "
            "seq len (131072), (4.54 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(1.71 GiB). Based on the available memory,  Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine.")
    f = failure(p)
    assert f["fix"].startswith("set server.max_model_len to about 49360 or less (1.71 of the 4.54 GiB")
    assert p.snapshot()["kv_cache_gib"] == 1.71


def test_kv_v1_07_gb_wording():
    p = run("ValueError: To serve at least one request with the models's max seq len (32768), (6.00 GB KV cache is "
            "needed, which is larger than the available KV cache memory (3.00 GB). Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    assert "about 16384" in failure(p)["fix"]


def test_kv_v0_rank_prefixed():
    p = run("[rank0]:   File \"/workspace/vllm/vllm/worker/worker.py\", line 565, in raise_if_cache_size_invalid",
            "[rank0]:     raise ValueError(",
            "[rank0]: ValueError: The model's max seq len (60000) is larger than the maximum number of tokens that "
            "can be stored in KV cache (58384). Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine.")
    f = failure(p)
    assert f["kind"] == "kv_cache_too_small"
    assert f["fix"].startswith("set server.max_model_len = 58384 (the most tokens the KV cache holds)")
    s = p.snapshot()
    assert (s["kv_cache_tokens"], s["gpu_blocks"], s["engine"]) == (58384, 3649, "v0")


def test_no_cache_memory():
    p = run("INFO 09-09 13:07:37 api_server.py:460] args: Namespace(gpu_memory_utilization=0.5)",
            "ERROR 12-19 01:22:33 engine.py:366] ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.")
    f = failure(p)
    assert f["kind"] == "no_cache_memory"
    assert "raise server.gpu_memory_utilization (now 0.5)" in f["fix"] and "server.enforce_eager = true" in f["fix"]


def test_max_len_exceeds_model_063_wording():
    p = run("ValueError: User-specified max_model_len (40000) is greater than the derived max_model_len "
            "(max_position_embeddings=32768 or model_max_length=None in model's config.json). This may lead to "
            "incorrect model outputs or CUDA errors. To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    f = failure(p)
    assert f["kind"] == "max_len_exceeds_model"
    assert f["fix"].startswith("set server.max_model_len = 32768 (the model's max_position_embeddings)")
    assert 'VLLM_ALLOW_LONG_MAX_MODEL_LEN = "1" in [server.env]' in f["fix"]


# --- memory -------------------------------------------------------------------------------------------

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.62 GiB. GPU 0 has a total capacity of 22.16 "
       "GiB of which 3.32 GiB is free. Process 1205606 has 18.83 GiB memory in use. Of the allocated memory 17.95 GiB "
       "is allocated by PyTorch, and 447.05 MiB is reserved by PyTorch but unallocated.")


def test_oom_while_loading_weights():
    p = run("INFO 09-20 10:00:00 model_runner.py:1000] Starting to load model Qwen/Qwen2.5-72B-Instruct...",
            "Traceback (most recent call last):",
            '  File "/x/vllm/worker/model_runner.py", line 999, in load_model',
            "    self.model = get_model(model_config=self.model_config,",
            '  File "/x/vllm/model_executor/models/qwen2.py", line 443, in __init__',
            "    self.lm_head = ParallelLMHead(config.vocab_size,",
            OOM)
    f = failure(p)
    assert f["kind"] == "oom_loading"
    assert f["fix"].startswith("the weights do not fit in GPU memory (tried to allocate 4.62 GiB, 3.32 GiB of 22.16 GiB "
                               "free): raise server.tensor_parallel_size")


def test_oom_loading_fp32_suggests_half():
    p = run("INFO 06-13 10:00:00 llm_engine.py:161] Initializing an LLM engine (v0.4.0.post1) with config: "
            "model='Qwen/Qwen2-7B-Instruct', dtype=torch.float32, tensor_parallel_size=1",
            "INFO 06-13 10:00:01 model_runner.py:1] Starting to load model Qwen/Qwen2-7B-Instruct...",
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 518.00 MiB. GPU 0 has a total capacty "
            "of 21.67 GiB of which 4.06 MiB is free.")
    f = failure(p)
    assert f["kind"] == "oom_loading"
    assert "raise server.tensor_parallel_size to 2" in f["fix"] and 'server.dtype = "half"' in f["fix"]


def test_oom_without_evidence_of_where_is_not_called_loading():
    p = run("INFO 06-13 10:00:00 llm_engine.py:161] Initializing an LLM engine (v0.4.0.post1) with config: "
            "model='Qwen/Qwen2-7B-Instruct', dtype=torch.float32, tensor_parallel_size=1",
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 518.00 MiB. GPU 0 has a total capacty "
            "of 21.67 GiB of which 4.06 MiB is free.")
    f = failure(p)
    assert f["kind"] == "oom_unknown"
    assert "does not show" in f["fix"] and "server.enforce_eager = true" in f["fix"]
    assert "server.tensor_parallel_size" in f["fix"] and 'server.dtype = "half"' in f["fix"]


def test_oom_during_profiling_after_load():
    p = run(LOADED,
            "ERROR 12-03 10:00:05 engine.py:366] Traceback (most recent call last):",
            'ERROR 12-03 10:00:05 engine.py:366]   File "/x/vllm/worker/worker.py", line 195, in '
            "determine_num_available_blocks",
            'ERROR 12-03 10:00:05 engine.py:366]   File "/x/vllm/worker/model_runner.py", line 1312, in profile_run',
            "ERROR 12-03 10:00:05 engine.py:366] " + OOM)
    f = failure(p)
    assert f["kind"] == "oom_runtime"
    assert "the profiling forward pass ran out of memory" in f["fix"] and "server.max_num_batched_tokens" in f["fix"]


def test_oom_during_cuda_graph_capture_by_phase():
    p = run(LOADED, "INFO 06-01 10:01:00 [kv_cache_utils.py:1] GPU KV cache size: 100,000 tokens",
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  40%|\u2588\u2588  | 20/51 [00:04<00:06]",
            "(EngineCore pid=1) RuntimeError: CUDA driver error: out of memory")
    f = failure(p)
    assert f["kind"] == "oom_runtime"
    assert f["fix"].startswith("CUDA graph capture ran out of memory: set server.enforce_eager = true, or lower "
                               "server.gpu_memory_utilization to 0.85")


def test_oom_sampler_warmup():
    p = run(LOADED, "(EngineCore_DP0 pid=9) RuntimeError: CUDA out of memory occurred when warming up sampler with "
                    "1024 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
                    "initializing the engine.")
    f = failure(p)
    assert f["kind"] == "oom_runtime" and "lower server.max_num_seqs" in f["fix"]


def test_oom_while_serving():
    p = run(LOADED, READY, "(EngineCore pid=1) ERROR 06-01 11:00:00 [core.py:1] " + OOM)
    f = failure(p)
    assert f["kind"] == "oom_runtime" and "while serving" in f["fix"]


def test_oom_names_memory_held_by_other_processes():
    p = run("ERROR 12-04 10:24:52 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 320.00 "
            "MiB. GPU 0 has a total capacity of 22.05 GiB of which 113.62 MiB is free. Process 198 has 13.57 GiB "
            "memory in use. Including non-PyTorch memory, this process has 7.79 GiB memory in use.")
    assert "other processes hold 13.57 GiB of this GPU" in failure(p)["fix"]


@pytest.mark.parametrize("text,fits", [
    ("ValueError: Free memory on device (3.22/4.0 GiB) on startup is less than desired GPU memory utilization "
     "(0.9, 3.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.", "0.78"),
    ("ValueError: Free memory on device cuda:0 (10.5/23.57 GiB) on startup is less than desired GPU memory "
     "utilization (0.9, 21.21 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
     "0.42"),
    ("ValueError: Free memory on device cuda:0 (10.5/23.57 GiB) on startup is less than the engine's budget after "
     "excluding external process's weights (0.9, 21.21 GiB). Decrease GPU memory utilization or reduce GPU memory "
     "used by other processes.", "0.42"),
])
def test_memory_in_use(text, fits):
    f = failure(run(f"(Worker pid=5) ERROR 06-01 10:00:00 [multiproc_executor.py:1] {text}"))
    assert f["kind"] == "memory_in_use"
    assert f["fix"].endswith(f"set server.gpu_memory_utilization = {fits}")
    assert "another process holds the rest" in f["fix"]


def test_memory_profiling_error_is_memory_in_use():
    f = failure(run("AssertionError: Error in memory profiling. Initial free memory 20.1 GiB, current free memory "
                    "22.3 GiB. This happens when other processes sharing the same container release GPU memory while "
                    "vLLM is profiling during initialization."))
    assert f["kind"] == "memory_in_use"


def test_cpu_memory():
    f = failure(run("(VllmWorker-0 pid=14751) ERROR 11-29 08:30:04 [multiproc_executor.py:953] ValueError: Available "
                    "memory on node 0 (7.57/9.21 GiB) on startup is less than desired CPU memory utilization (0.92, "
                    "8.48 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU "
                    "memory reserved (despite its name)."))
    assert f["kind"] == "cpu_memory" and "set server.gpu_memory_utilization = 0.8" in f["fix"]


# --- environment -----------------------------------------------------------------------------------

@pytest.mark.parametrize("lib,hint", [
    ("libcublas.so.12", "nvidia-cublas-cu12"), ("libcudart.so.13", "'nvidia-cuda-runtime==13.*'"),
    ("libcuda.so.1", "NVIDIA driver"), ("libtorch_cuda.so", "CPU build"),
])
def test_missing_cuda_library(lib, hint):
    f = failure(run(f"ImportError: {lib}: cannot open shared object file: No such file or directory"))
    assert f["kind"] == "missing_cuda_library" and lib in f["fix"] and hint in f["fix"]


def test_missing_library_warning_is_soft_until_exit():
    p = run("WARNING 08-27 13:59:59 _custom_ops.py:15] Failed to import from vllm._C with ImportError('libcudart.so.12: "
            "cannot open shared object file: No such file or directory')")
    assert p.snapshot()["failure"] is None and p.phase == "starting"
    p.process_exited(1)
    assert failure(p)["kind"] == "missing_cuda_library"


@pytest.mark.parametrize("text", [
    "RuntimeError: CUDART error: peer access is not supported between these two devices",
    "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'peer access is not supported between these two "
    "devices'",
    "(VllmWorkerProcess pid=221) ERROR 04-01 10:00:00 [multiproc_worker_utils.py:238] torch.distributed."
    "DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled system error (run "
    "with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
    "RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)",
])
def test_nccl_p2p(text):
    f = failure(run(text))
    assert f["kind"] == "nccl_p2p" and 'NCCL_P2P_DISABLE = "1" in [server.env]' in f["fix"]


def test_p2p_warning_is_soft_and_server_can_still_come_up():
    p = run("WARNING 09-09 13:08:00 custom_all_reduce.py:134] Custom allreduce is disabled because your platform lacks "
            "GPU P2P capability or P2P test failed. To silence this warning, specify disable_custom_all_reduce=True "
            "explicitly.", READY)
    assert p.phase == "ready" and p.snapshot()["failure"] is None
    p.process_exited(-15)
    assert p.phase == "stopped" and p.snapshot()["failure"] is None


def test_shm_after_nccl_error_upgrades_the_diagnosis():
    p = run("torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:268, unhandled system error",
            "Last error:", "Error while creating shared memory segment /dev/shm/nccl-1YsMbG (size 7340384)")
    f = failure(p)
    assert f["kind"] == "shm_too_small" and "--shm-size" in f["fix"]


def test_no_space_left_is_shm_only_with_shared_memory_context():
    p = run("Traceback (most recent call last):",
            '  File "/usr/lib/python3.12/multiprocessing/shared_memory.py", line 104, in __init__',
            "OSError: [Errno 28] No space left on device")
    assert failure(p)["kind"] == "shm_too_small"
    p = run("Traceback (most recent call last):", '  File "/x/huggingface_hub/file_download.py", line 1, in _download',
            "OSError: [Errno 28] No space left on device", rc=1)
    assert failure(p)["kind"] == "unknown"  # a full disk is not /dev/shm


# --- model files ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer",
    "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge",
    "ValueError: Following weights were not initialized from checkpoint: {'model.layers.27.mlp.down_proj.weight'}",
    "RuntimeError: Cannot find any model weights with `/models/qwen`",
])
def test_weights_incomplete(text):
    assert failure(run(text))["kind"] == "weights_incomplete"


@pytest.mark.parametrize("text,path", [
    ("OSError: Qwen/Qwen2.5-7B-Instrct is not a local folder and is not a valid model identifier listed on "
     "'https://huggingface.co/models'", "Qwen/Qwen2.5-7B-Instrct"),
    ("ValueError: Invalid repository ID or local directory specified: '/srv/nope'. Please verify the following "
     "requirements:", "/srv/nope"),
    ("huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. Repository Not Found for url: "
     "https://huggingface.co/api/models/Qwen/nope.", None),
])
def test_model_not_found(text, path):
    f = failure(run(text))
    assert f["kind"] == "model_not_found"
    if path:
        assert f"server.model = '{path}'" in f["fix"]


def test_http_404_for_unknown_model_is_not_a_startup_failure():
    p = run(READY, "ERROR 06-01 10:00:00 [serving_chat.py:1] The model `gpt-4` does not exist.")
    assert p.phase == "ready" and p.snapshot()["failure"] is None


# --- ports, arguments, config -------------------------------------------------------------------------

def test_port_in_use_uvicorn_after_startup():
    p = run("INFO:     Started server process [60858]", READY,
            "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
            "INFO:     Waiting for application shutdown.", "INFO:     Application shutdown complete.")
    f = failure(p)
    assert f["kind"] == "port_in_use" and f["fix"].startswith("port 8000 is already in use: set server.port")
    assert p.phase == "failed" and p.snapshot()["ready"] is False


def test_port_in_use_prebind_uses_port_from_args():
    p = run("(APIServer pid=1) INFO 06-01 10:00:00 [api_utils.py:1] non-default args: {'port': 8011}",
            "OSError: [Errno 98] Address already in use")
    assert failure(p)["fix"].startswith("port 8011 is already in use")


def test_internal_port_eaddrinuse():
    p = run('  File "/x/torch/distributed/rendezvous.py", line 186, in _create_c10d_store',
            "RuntimeError: The server socket has failed to listen on any local network address. useIpv6: 0, code: "
            "-98, name: EADDRINUSE, message: address already in use")
    f = failure(p)
    assert f["kind"] == "port_in_use" and "VLLM_PORT" in f["fix"]


@pytest.mark.parametrize("text,part", [
    ("vllm serve: error: unrecognized arguments: --gpu-memory-utilisation 0.9", "--gpu-memory-utilization"),
    ("api_server.py: error: unrecognized arguments: --frobnicate", "remove it from server.extra_args"),
    ("api_server.py: error: argument --dtype: invalid choice: 'bf17' (choose from 'auto', 'half')", "server.dtype"),
])
def test_bad_argument(text, part):
    f = failure(run("usage: api_server.py [-h] [--model MODEL]", text, rc=2))
    assert f["kind"] == "bad_argument" and part in f["fix"]


def test_error_text_that_is_not_argparse():
    p = run(READY, "ERROR 06-01 10:00:00 [serving_chat.py:1] tokenizer: error: chat template rendering failed")
    assert p.phase == "ready" and p.snapshot()["failure"] is None


def test_bf16_unsupported():
    f = failure(run("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla "
                    "T4 GPU has compute capability 7.5. You can use float16 instead by explicitly setting the `dtype` "
                    "flag in CLI, for example: --dtype=half."))
    assert f["kind"] == "bf16_unsupported"
    assert f["fix"] == ('the Tesla T4 GPU has compute capability 7.5 and bfloat16 needs 8.0: set server.dtype = "half" '
                        "(float16)")


def test_tp_indivisible():
    f = failure(run("ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8)."))
    assert f["kind"] == "tp_indivisible"
    assert f["fix"].startswith("28 attention heads cannot be split over 8 GPUs: set server.tensor_parallel_size = 4 ")
    assert "1, 2, 4, 7" in f["fix"]


# --- engine death, unknown, wrappers, exit codes --------------------------------------------------

def test_engine_dead_after_ready():
    p = run(READY, "(APIServer pid=1) ERROR 06-01 10:05:00 [async_llm.py:480] vllm.v1.engine.exceptions."
                   "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.")
    f = failure(p)
    assert f["kind"] == "engine_dead" and p.phase == "failed"


def test_engine_dead_gives_way_to_the_root_cause():
    p = run(READY, "EngineDeadError: EngineCore encountered an issue.",
            "(EngineCore pid=1) ERROR 06-01 10:05:00 [core.py:1] " + OOM)
    assert failure(p)["kind"] == "oom_runtime"


def test_wrapper_line_fails_and_root_cause_below_it_wins():
    p = LogParser()
    ev = p.feed("(EngineCore_DP0 pid=1) ERROR 09-21 10:00:00 [core.py:708] EngineCore failed to start.")
    assert p.phase == "failed" and [e for e in ev if isinstance(e, Failure)] == []
    assert failure(p)["kind"] == "unknown" and failure(p)["message"] == "EngineCore failed to start."
    ev = p.feed("(EngineCore_DP0 pid=1) ERROR 09-21 10:00:00 [core.py:708] ValueError: Bfloat16 is only supported on "
                "GPUs with compute capability of at least 8.0. Your Tesla V100-SXM2-32GB GPU has compute capability 7.0.")
    assert [e.kind for e in ev if isinstance(e, Failure)] == ["bf16_unsupported"]
    ev = p.process_exited(1)
    assert ev == [] and failure(p)["kind"] == "bf16_unsupported"  # already reported: no second Failure event


def test_unknown_uses_last_error_line():
    p = run("ERROR 06-01 10:00:00 [core.py:1] Something nobody has seen before: 42", "INFO 06-01 10:00:01 [x.py:1] bye")
    assert p.snapshot()["failure"] is None and p.phase == "starting"
    ev = p.process_exited(3)
    f = failure(p)
    assert (f["kind"], f["message"]) == ("unknown", "Something nobody has seen before: 42")
    assert "exited with code 3" in f["fix"]
    assert [type(e) for e in ev] == [Milestone, Failure]


def test_unknown_prefers_exception_line_over_traceback_body():
    p = run("ERROR 06-01 10:00:00 [core.py:1] Traceback (most recent call last):",
            'ERROR 06-01 10:00:00 [core.py:1]   File "/x/y.py", line 3, in f',
            "ERROR 06-01 10:00:00 [core.py:1]     do_something(ValueError)",
            "ERROR 06-01 10:00:00 [core.py:1] KeyError: 'vpm.encoder.layers.0.mlp.fc1.weight'", rc=1)
    assert failure(p)["message"] == "KeyError: 'vpm.encoder.layers.0.mlp.fc1.weight'"


def test_sigkill_without_signature():
    p = run(LOADED, rc=-9)
    f = failure(p)
    assert f["kind"] == "unknown" and "SIGKILL" in f["fix"]
    assert f["message"] == "vLLM was killed by signal 9 (SIGKILL)"  # not "exited with code -9", nor an older line


@pytest.mark.parametrize("rc", [0, -15, 143, -2])
def test_ready_server_stopped_cleanly(rc):
    p = run(LOADED, READY, rc=rc)
    s = p.snapshot()
    assert (s["phase"], s["ready"], s["failure"]) == ("stopped", False, None)
    assert p.timeline[-1].phase == "stopped"


def test_nonzero_exit_while_starting_fails():
    p = run(LOADED, rc=1)
    assert (p.phase, failure(p)["kind"], failure(p)["message"]) == ("failed", "unknown", "vLLM exited with code 1")


def test_diagnosed_failure_survives_a_sigterm_from_the_supervisor():
    p = run("ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8).", rc=-15)
    assert p.phase == "failed" and failure(p)["kind"] == "tp_indivisible"


def test_errors_during_a_requested_stop_are_not_failures():
    p = run(LOADED, READY)
    p.stop_requested()
    p.feed("(EngineCore pid=1) ERROR 06-01 11:00:00 [core.py:1] EngineDeadError: EngineCore encountered an issue.")
    p.feed("ERROR 06-01 11:00:00 [core.py:1] EngineCore failed to start.")
    assert p.phase == "ready"
    p.process_exited(-9)  # the supervisor had to kill it: still a stop the user asked for
    assert p.phase == "stopped" and p.snapshot()["failure"] is None


def test_failure_before_ready_is_dropped_when_the_server_comes_up():
    p = run("RuntimeError: CUDART error: peer access is not supported between these two devices")
    assert p.phase == "failed"
    p.feed(READY)
    assert p.phase == "ready" and p.snapshot()["failure"] is None


def test_failure_events_and_milestones_in_order():
    p = LogParser()
    ev = p.feed("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already "
                "in use", t=5.0)
    assert [type(e).__name__ for e in ev] == ["Milestone", "Milestone", "Failure"]
    assert ev[0] == Milestone("starting", 5.0) and ev[1] == Milestone("failed", 5.0)
    assert p.feed("ERROR:    [Errno 98] again: address already in use") == []  # same kind: no repeat


def test_info_lines_with_failure_words_are_ignored():
    p = run("WARNING 11-29 08:33:18 [system_utils.py:255] Found ulimit of 20000 ... fd limit errors like "
            "`OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n",
            "INFO 10-12 00:26:58 model_runner.py:1] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are "
            "running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.",
            "INFO 04-23 14:42:53 [multiproc_worker_utils.py:124] Killing local vLLM worker processes")
    assert p.phase == "starting" and p.snapshot()["failure"] is None


def test_every_kind_is_reachable():
    seen = {
        "kv_cache_too_small", "no_cache_memory", "max_len_exceeds_model", "oom_loading", "oom_runtime", "memory_in_use",
        "cpu_memory", "missing_cuda_library", "nccl_p2p", "shm_too_small", "weights_incomplete", "model_not_found",
        "port_in_use", "bad_argument", "bf16_unsupported", "tp_indivisible", "engine_dead", "unknown",
        "oom_unknown", "missing_python_module",  # tests/test_logparse_pastes.py
        "cpu_binding",  # tests/unit/test_root_cause.py
        "not_generating",  # the supervisor's readiness probe: tests/unit/test_ready_owner.py
    }
    assert seen == set(FAILURE_KINDS)  # each has a test above
