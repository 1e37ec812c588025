"""Compiled regexes for vLLM log lines, per version (the format strings are vllm/logger.py's prefix and
the logger calls named beside each pattern; the real logs in tests/fixtures/vllm-logs/ exercise them).

Everything here is applied *after* a cheap substring prefilter in the parser, so the regexes may be
as precise as they need to be without costing time on the many lines that match nothing.
"""

from __future__ import annotations

import re

# --- line envelope -------------------------------------------------------------------------------

# CSI sequences (colours, cursor moves tqdm uses), OSC strings, and two-byte escapes.
ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# The same colour codes pasted as text (`cat -v`, some web pastes): "^[[1;36m(EngineCore_DP0 pid=1)^[[0;0m".
LITERAL_ANSI = re.compile(r"\^\[\[[0-9;?]*[ -/]*[@-~]")
# "(VllmWorkerProcess pid=1)", "(VllmWorker rank=0 pid=85)", "(VllmWorker TP0 pid=3)",
# "(Worker_PP1_TP0 pid=3)", "(EngineCore_DP0 pid=9)", "(RayWorkerWrapper pid=2, ip=10.0.0.1)", ...
PROC = re.compile(
    r"\((?P<name>[A-Za-z_][\w.-]*)(?: (?P<extra>[^()\s=]+(?:=\d+)?))? pid=(?P<pid>\d+)"
    r"(?:, ip=(?P<ip>[^)\s]+))?\)[ \t]?"
)
# "INFO 02-27 19:31:24 api_server.py:912] msg" (<=0.7) and "INFO 04-23 14:42:26 [api_server.py:1043] msg".
HDR = re.compile(
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[?([^\]\s]+)\] ?"
)
# uvicorn's own records: "INFO:     Application startup complete."
UVICORN = re.compile(r"(TRACE|DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
# PyTorch distributed traceback prefix "[rank0]: " and C++ log lines "[W423 14:42:53.2355 file.cpp:1] ".
RANK = re.compile(r"\[rank(\d+)\]:[ \t]?")
TORCH_CPP = re.compile(r"\[([WEIF])\d{4} [\d:.]+ [^\]]*\] ")
# Timestamps put in front by CI (buildkite "[2024-09-05T00:38:34Z] ") or `docker logs -t`.
OUTER_TS = re.compile(
    r"(?:\[\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\]"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?) "
)
# Final line of a Python traceback: "ValueError: ...", "torch.OutOfMemoryError: ...", "Exception: ...".
EXCEPTION = re.compile(
    r"\s*(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*:\s|[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)\s*$)"
)
# The looser shape used to end a traceback's code lines: "ncclUnhandledCudaError: ...", "x.y.SomeError: ...".
EXCEPTION_LIKE = re.compile(r"\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*: ")
MP_PROCESS_DIED = re.compile(r"Process [\w.-]+:\s*$")

# --- versions, engine, config --------------------------------------------------------------------

VERSION_API = re.compile(r"vLLM (?:API )?server version (\S+?),?(?:\s|$)")
VERSION_LOGO = re.compile(r"\bversion\s+(\d\S*)")
MODEL_LOGO = re.compile(r"\bmodel\s+(\S+)")
ENGINE_INIT = re.compile(r"Initializing an? (?:(V[01]) )?LLM engine \(v([^)\s]+)\) with config:?")
VERSION_NUM = re.compile(r"(\d+)\.(\d+)")
CFG = re.compile(
    r"""\b(model|max_seq_len|tensor_parallel_size|pipeline_parallel_size|kv_cache_dtype|dtype|"""
    r"""enforce_eager|quantization)=(?:'([^']*)'|torch\.(\w+)|([\w.+-]+))"""
)
# args: Namespace(port=8000, ...) (<=0.8) and non-default args: {'port': 8011, ...} (0.9+)
ARG = re.compile(
    r"""['"]?\b(port|gpu_memory_utilization|max_model_len|tensor_parallel_size|block_size|model|"""
    r"""kv_cache_dtype|dtype|enforce_eager|max_num_seqs|max_num_batched_tokens|host)['"]?(?:=|: )"""
    r"""(?:'([^']*)'|"([^"]*)"|([\w.+-]+))"""
)
ARCH = re.compile(r"Resolved architecture: (\w+)")
CMD_FLAG = re.compile(r"\s--([a-z][\w-]*)[ =]([^\s-]\S*)")
CMD_KEYS = frozenset(("port", "gpu_memory_utilization", "max_model_len", "tensor_parallel_size", "block_size",
                      "model", "kv_cache_dtype", "dtype", "max_num_seqs", "max_num_batched_tokens", "host",
                      "pipeline_parallel_size"))
MAXLEN = re.compile(r"Using max model len (\d+)")
BATCHED = re.compile(r"max_num_batched_tokens=(\d+)")

# --- weights -------------------------------------------------------------------------------------

WEIGHTS_OLD = re.compile(r"Loading model weights took (-?[\d.]+) ?GB")
WEIGHTS = re.compile(r"Model loading took (-?[\d.]+) ?Gi?B(?: memory)? and ([\d.]+) s")
LOAD_READ = re.compile(r"Loading weights took ([\d.]+) s")
SHARDS = re.compile(r"checkpoint shards[^:]*:\s+(\d+)%[^|]*\|\s*(\d+)/(\d+)")

# --- memory profiling / KV cache -----------------------------------------------------------------

MEMPROF64 = re.compile(
    r"Memory profiling results: total_gpu_memory=([\d.]+)GiB.*?kv_cache_size=(-?[\d.]+)GiB"
    r"(?: gpu_memory_utilization=([\d.]+))?"
)
# the same 0.6.4 line's other terms (vllm/worker/worker.py@v0.6.4.post1): usage at start (context, other processes),
# torch's allocated peak (weights + activation) and non-torch memory (total - free - torch allocated)
MEMPROF64_TERMS = re.compile(
    r"initial_memory_usage=(-?[\d.]+)GiB peak_torch_memory=(-?[\d.]+)GiB.*?non_torch_memory=(-?[\d.]+)GiB")
# V0 0.6.6-0.10 (worker.py): "total_gpu_memory (23.58GiB) x gpu_memory_utilization (0.90) = 21.22GiB"
MEMPROF_TOTAL = re.compile(r"total_gpu_memory \(([\d.]+) ?GiB\) x gpu_memory_utilization \(([\d.]+)\)"
                           r"(?: = ([\d.]+) ?GiB)?")
MEMPROF_KV = re.compile(
    r"model weights take ([\d.]+) ?GiB(?:; non_torch_memory takes (-?[\d.]+) ?GiB)?"
    r"(?:; PyTorch activation peak memory takes (-?[\d.]+) ?GiB)?.*?reserved for KV Cache is (-?[\d.]+) ?GiB"
)
BLOCKS = re.compile(r"(?:#\s*)?(?!CPU)([A-Za-z]{3,4}) blocks: (\d+)(?:, # CPU blocks: (\d+))?")
AVAIL_KV = re.compile(r"Available KV cache memory: (-?[\d.]+) ?GiB")
# vllm/v1/worker/cpu_worker.py (0.32): "Auto set (1.93/13.09) GiB for KV cache on node 0, with 2.62 GiB requested
# memory for the worker. 0.68 GiB memory was consumed by non-kv usages." and "Explicitly set (4/13.09) GiB ...".
CPU_KV = re.compile(
    r"(Auto|Explicitly) set \(([\d.]+)/([\d.]+)\) GiB for KV cache(?: on node (\d+))?"
    r"(?:, with ([\d.]+) GiB requested memory for the worker\. ([\d.]+) GiB memory was consumed)?"
)
# vLLM's own memory breakdown, once per worker (vllm/v1/worker/gpu_worker.py): DEBUG in 0.1x-0.2x ("W GiB for weight,
# A GiB for peak activation, N GiB for non-torch memory, and G GiB for CUDAGraph memory"), INFO from 0.32 ("C GiB
# for consumed memory (weights + non-torch), A GiB for peak activation, and G GiB for CUDAGraph memory").
FREE_ON_START = re.compile(r"Free memory on device \((-?[\d.]+)/([\d.]+) GiB\) on startup")
DESIRED_UTIL = re.compile(r"Desired GPU memory utilization is \(([\d.]+), ([\d.]+) GiB\)")
USAGE_WEIGHT = re.compile(
    r"Actual usage is (-?[\d.]+) GiB for weight, (-?[\d.]+) GiB for peak activation, (-?[\d.]+) GiB for "
    r"non-torch memory, and (-?[\d.]+) GiB for CUDAGraph memory")
USAGE_CONSUMED = re.compile(
    r"Actual usage is (-?[\d.]+) GiB for consumed memory \(weights \+ non-torch\), (-?[\d.]+) GiB for peak "
    r"activation, and (-?[\d.]+) GiB for CUDAGraph memory")
KV_SUGGEST = re.compile(r"--kv-cache-memory=(\d+)`?(?: \([-\d.]+ GiB\))? to fit into requested memory, or "
                        r"`?--kv-cache-memory=(\d+)")
KV_IN_USE = re.compile(r"Current kv cache memory in use is (-?[\d.]+) ?(GiB|bytes)")
# --max-model-len auto (vllm/v1/core/kv_cache_utils.py): "Auto-fit max_model_len: reduced from 32768 to 20480 to
# fit in available KV cache memory (3.12 GiB GPU)" / "... full model context length 32768 fits in ...".
AUTO_FIT = re.compile(r"Auto-fit max_model_len: (?:reduced from (\d+) to (\d+)|full model context length (\d+) fits)"
                      r"(?:.*?memory \(([\d.]+) GiB)?")
# VLLM_ENABLE_STARTUP_PLAN=1 (vllm/v1/worker/startup_plan.py)
PLAN_APPLIED = re.compile(r"Applying persisted startup plan \(fingerprint (\w+)\): kv_cache_memory_bytes=(\d+)")
PLAN_SAVED = re.compile(r"Saved startup plan to (\S+)")
NUM_GPU_BLOCKS = re.compile(r"num_gpu_blocks is: (\d+)")
KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")

# --- CUDA graphs, compile, init, listen ----------------------------------------------------------

GRAPH_DONE = re.compile(r"Graph capturing finished in ([\d.]+) secs?(?:, took (-?[\d.]+) GiB)?")
# tqdm bars: "Capturing CUDA graphs (decode, FULL): 100%|██████████| 5/5 [00:00<00:00, 12.14it/s]"
GRAPH_BAR = re.compile(r"(Capturing (?:CUDA graph|cudagraph)[^:]*):\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")
GRAPH_EST = re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB")
# torch.compile's cache (vllm/compilation/backends.py): its directory holds vLLM's own cache key (the hash folder)
COMPILE_CACHE_DIR = re.compile(r"Using cache directory: (\S*?torch_compile_cache/([0-9a-f]+))/\S* for vLLM")
COMPILE_TOTAL = re.compile(r"torch\.compile (?:takes|took) ([\d.]+) s in total")
DYNAMO = re.compile(r"Dynamo bytecode transform time: ([\d.]+) s")
INIT_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
LISTEN = re.compile(r"Starting vLLM (?:API )?server(?: \d+)? on (\S+)")
UVICORN_RUN = re.compile(r"Uvicorn running on (?:(\w+://[^\s(]+)|socket \('([^']*)', (\d+)\))")
STATS = re.compile(
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, (?:Swapped: \d+ reqs, Pending|Waiting): (\d+) reqs"
    r"(?:.*?KV cache usage: ([\d.]+)%)?"
)

# --- tracebacks ----------------------------------------------------------------------------------

FRAME = re.compile(r'File "([^"]*)", line \d+, in (\S+)')

# Prefix names → engine generation (strong evidence; one look-up per new process tag).
V1_PROC_PREFIXES = ("EngineCore", "VllmWorker ", "VllmWorker-", "Worker")
V0_PROC_NAMES = frozenset(("VllmWorkerProcess",))
# File names in the log header that only one generation logs from (weak evidence).
V1_FILES = frozenset(("gpu_model_runner.py", "kv_cache_utils.py", "core.py", "gpu_worker.py",
                      "kv_cache_planning.py", "startup_plan.py",  # 0.33 moved the KV-planning lines there
                      "cpu_worker.py", "multiproc_executor.py", "core_client.py", "async_llm.py"))
V0_FILES = frozenset(("llm_engine.py", "model_runner.py", "executor_base.py", "worker.py",
                      "multiproc_worker_utils.py", "gpu_executor.py", "distributed_gpu_executor.py",
                      "engine.py", "multiproc_gpu_executor.py", "ray_gpu_executor.py"))
TP_RE = re.compile(r"TP(\d+)")
PP_RE = re.compile(r"PP(\d+)")
DP_RE = re.compile(r"DP(\d+)")
RANK_EQ = re.compile(r"rank=(\d+)")
TRAILING_INT = re.compile(r"[-_](\d+)$")
