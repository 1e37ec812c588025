"""Failure signatures: which vLLM/PyTorch/NCCL line means which kind, and the fix in config.toml terms.

Each signature is (prefilter substring, handler). The parser runs handlers only on error-ish lines
(ERROR/CRITICAL records, uvicorn errors, bare traceback/stderr lines) whose text contains the
substring; a handler returns a Failure or None (not really this kind after all).

Fixes name settings the way config.toml does: `[server]` keys are vllm serve flags with dashes
turned into underscores (server.max_model_len, server.gpu_memory_utilization, ...); environment
variables go in the `[server.env]` table.
"""

from __future__ import annotations

import math
import re
from typing import Callable

from backend.logparse.environment import (
    _BF16,
    _BIND,
    _LIB,
    _MODULE,
    _TP,
    NCCL_FIX,
    _argparse,
    _bf16,
    _lib,
    _model,
    _module,
    _nccl,
    _port,
    _positional_model,
    _shm,
    _tp,
    _weights,
    lib_fix,
)
from backend.logparse.events import PHASE_INDEX, Failure
from backend.logparse.handler import ParseState

# --- helpers -------------------------------------------------------------------------------------

_VLLM_DEFAULT_UTIL = 0.9


def _num(s: str | None) -> float | None:
    if s is None:
        return None
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def _fmt(x: float) -> str:
    """12.0 -> '12', 3.18 -> '3.18'."""
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def _util(p: ParseState) -> float | None:
    u = p.info.get("gpu_memory_utilization")
    return u if isinstance(u, float) else None


def _util_now(p: ParseState) -> str:
    u = _util(p)
    return f" (now {_fmt(u)})" if u is not None else ""


def _lower_util(p: ParseState) -> str:
    u = _util(p) or _VLLM_DEFAULT_UTIL
    return _fmt(max(0.05, math.floor((u - 0.05) * 100 + 1e-9) / 100))


def _fraction_that_fits(free: float, total: float) -> str:
    """A utilization that fits in `free` of `total`, with a 2-point margin, rounded down."""
    if total <= 0:
        return "a lower value"
    return _fmt(max(0.05, math.floor((free / total - 0.02) * 100 + 1e-9) / 100))


def _frames(p: ParseState) -> str:
    return "\n".join(p.frames)


def _kv_dtype_hint(p: ParseState) -> str:
    kvd = str(p.info.get("kv_cache_dtype") or "auto")
    if kvd.startswith("fp8"):
        return ""
    return ', or set server.kv_cache_dtype = "fp8" to fit about twice the tokens'


# --- KV cache ------------------------------------------------------------------------------------

_KV_V1 = re.compile(
    r"max seq len \((\d+)\)(?:, \(([\d.]+) ?Gi?B KV)?(?:.*?available KV cache memory \(([\d.]+) ?Gi?B\))?"
    r"(?:.*?estimated maximum model length is (\d+))?"
)
_KV_AVAIL = re.compile(r"available KV cache memory \(([\d.]+) ?Gi?B\)")
_KV_EST = re.compile(r"estimated maximum model length is (\d+)")
_KV_V0 = re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored "
                    r"in KV cache \((\d+)\)")


def kv_fix(p: ParseState, max_len: int | None, needed: float | None, avail: float | None,
           estimate: int | None, capacity: int | None = None) -> str:
    util = f"raise server.gpu_memory_utilization{_util_now(p)} to give the KV cache more memory"
    if estimate:
        head = f"set server.max_model_len = {estimate} (the largest vLLM estimated)"
    elif capacity:
        head = f"set server.max_model_len = {capacity} (the most tokens the KV cache holds)"
    elif max_len and needed and avail and needed > 0:
        approx = int(max_len * avail / needed) // 16 * 16
        head = (f"set server.max_model_len to about {approx} or less ({_fmt(avail)} of the "
                f"{_fmt(needed)} GiB needed for {max_len} tokens is available)")
    else:
        head = "lower server.max_model_len"
    return f"{head}, or {util}{_kv_dtype_hint(p)}"


def _kv_v1(p: ParseState, msg: str) -> Failure | None:
    m = _KV_V1.search(msg)
    if not m:
        return None
    max_len = int(m.group(1))
    needed, avail = _num(m.group(2)), _num(m.group(3))
    est = int(m.group(4)) if m.group(4) else None
    note_kv_failure(p, max_len, needed, avail, est, None)
    return Failure("kv_cache_too_small", msg.strip(), kv_fix(p, max_len, needed, avail, est))


def _kv_v0(p: ParseState, msg: str) -> Failure | None:
    m = _KV_V0.search(msg)
    if not m:
        return None
    max_len, cap = int(m.group(1)), int(m.group(2))
    note_kv_failure(p, max_len, None, None, None, cap)
    return Failure("kv_cache_too_small", msg.strip(), kv_fix(p, max_len, None, None, None, cap))


def note_kv_failure(p: ParseState, max_len: int, needed: float | None, avail: float | None,
                     estimate: int | None, capacity: int | None) -> None:
    """Keep what a KV-too-small message says, for the fix and for a wrapped continuation line."""
    p.kv_fail = {"max_len": max_len, "needed": needed, "avail": avail, "estimate": estimate,
                  "capacity": capacity}
    p.info.setdefault("max_model_len", max_len)
    if capacity is not None:
        p.set_engine("v0", "strong", None)
        p.figures["kv_cache_tokens"] = capacity
        bs = p.info.get("block_size") or 16
        if capacity % bs == 0:
            p.figures["gpu_blocks"] = capacity // bs
    else:
        p.set_engine("v1", "strong", None)
        if needed is not None:
            p.figures["kv_needed_gib"] = needed
        if avail is not None:
            p.set_rank_figure("kv_cache_gib", avail, 0, None)
        if estimate is not None:
            p.figures["estimated_max_model_len"] = estimate


def kv_continuation(p: ParseState, msg: str) -> Failure | None:
    """A wrapped paste of the V1 message: fill in the available memory / estimate from a later line."""
    f = p.hard_failure
    kv = p.kv_fail
    if f is None or f.kind != "kv_cache_too_small" or kv is None:
        return None
    changed = False
    m = _KV_AVAIL.search(msg)
    if m and kv["avail"] is None:
        kv["avail"] = float(m.group(1))
        p.set_rank_figure("kv_cache_gib", kv["avail"], 0, None)
        changed = True
    m = _KV_EST.search(msg)
    if m and kv["estimate"] is None:
        kv["estimate"] = int(m.group(1))
        p.record_figure("estimated_max_model_len", kv["estimate"], None, None)
        changed = True
    if not changed:
        return None
    fix = kv_fix(p, kv["max_len"], kv["needed"], kv["avail"], kv["estimate"], kv["capacity"])
    return Failure(f.kind, f"{f.message} {msg.strip()}", fix)


def _no_cache(p: ParseState, msg: str) -> Failure | None:
    return Failure("no_cache_memory", msg.strip(),
                   f"no memory is left for the KV cache once the weights and activations are in: raise "
                   f"server.gpu_memory_utilization{_util_now(p)}, set server.enforce_eager = true, lower "
                   f"server.max_num_seqs, or use a smaller/quantized model or a larger server.tensor_parallel_size")


_MAXLEN = re.compile(r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len "
                     r"\((\w+)=([\d.]+)")


def _max_len(p: ParseState, msg: str) -> Failure | None:
    m = _MAXLEN.search(msg)
    if m:
        derived = int(float(m.group(3)))
        head = f"set server.max_model_len = {derived} (the model's {m.group(2)})"
    else:
        head = "lower server.max_model_len to the model's max_position_embeddings"
    return Failure("max_len_exceeds_model", msg.strip(),
                   f"{head}; only if the model really handles longer inputs (e.g. with rope scaling) set "
                   f'VLLM_ALLOW_LONG_MAX_MODEL_LEN = "1" in [server.env]')


# --- memory --------------------------------------------------------------------------------------

_CAPTURE_WORDS = ("capture_model", "_capture_cudagraphs", "capture_graph", "graph_capture", "cudagraph",
                  "CUDAGraph", "cuda/graphs.py", "capture_end", "capture_begin", "cuda_graph")
_PROFILE_WORDS = ("profile_run", "_dummy_run", "determine_num_available_blocks", "determine_available_memory",
                  "_dummy_sampler_run", "_dummy_pooler_run", "initialize_kv_cache", "_initialize_kv_caches",
                  "initialize_cache", "_init_cache_engine", "profile_cudagraph_memory", "warming_up_model",
                  "compile_or_warm_up_model", "forward")
_LOAD_WORDS = ("load_model", "get_model", "load_weights", "_initialize_model", "initialize_model",
               "ParallelLMHead", "weight_loader", "init_device")
_OOM_TOTAL = re.compile(r"total capac\w* of ([\d.]+ [KMG]iB) of which ([\d.]+ [KMG]iB) is free")
_OOM_OTHER = re.compile(r"Process \d+ has ([\d.]+) ([KMG]iB) memory in use")
_OOM_SELF = re.compile(r"this process has ([\d.]+ [KMG]iB) memory in use")
_OOM_TRIED = re.compile(r"Tried to allocate ([\d.]+ [KMG]iB)")
_UNIT = {"KiB": 1 / (1 << 20), "MiB": 1 / 1024, "GiB": 1.0}


def _oom(p: ParseState, msg: str) -> Failure | None:
    if "out of memory" not in msg and "OutOfMemoryError" not in msg:
        return None
    frames = _frames(p)
    progress = p.last_progress  # the phase reached before the failure lines
    weights_done = p.weights_done or PHASE_INDEX[progress] >= PHASE_INDEX["profiling"]
    if "warming up sampler" in msg or "warming up pooler" in msg:
        where = "sampler"
    elif any(w in frames for w in _CAPTURE_WORDS):
        where = "graphs"
    elif any(w in frames for w in _LOAD_WORDS) and not weights_done:
        where = "loading"
    elif progress == "cuda_graphs" and not p.was_ready:
        where = "graphs"  # "Capturing CUDA graphs ..." was the last thing it did
    elif any(w in frames for w in _PROFILE_WORDS):
        where = "serving" if p.was_ready else "profiling"
    elif p.was_ready:
        where = "serving"
    elif weights_done or progress == "kv_cache":
        where = "profiling"
    elif progress == "loading_weights":
        where = "loading"
    else:
        where = "unknown"  # no frame or line says where: do not guess
    facts = []
    m = _OOM_TRIED.search(msg)
    if m:
        facts.append(f"tried to allocate {m.group(1)}")
    m = _OOM_TOTAL.search(msg)
    if m:
        facts.append(f"{m.group(2)} of {m.group(1)} free")
    others = ""
    if _OOM_SELF.search(msg):
        gib = sum(float(v) * _UNIT.get(u, 1.0) for v, u in _OOM_OTHER.findall(msg))
        if gib >= 0.01:
            others = f"other processes hold {_fmt(round(gib, 2))} GiB of this GPU: stop them, or "
    detail = f" ({', '.join(facts)})" if facts else ""
    dtype = str(p.info.get("dtype") or "")
    fp32 = ('; the weights are loaded as float32: set server.dtype = "half"'
            if dtype in ("float32", "float") else "")
    if where == "loading":
        tp = p.info.get("tensor_parallel_size")
        tp_to = f" to {tp * 2}" if isinstance(tp, int) and tp >= 1 else ""
        fix = (f"the weights do not fit in GPU memory{detail}: {others}raise server.tensor_parallel_size{tp_to} "
               f"to split them over more GPUs, or use a smaller or quantized model (server.model, "
               f"server.quantization){fp32}")
        return Failure("oom_loading", msg.strip(), fix)
    lower = f"lower server.gpu_memory_utilization{_util_now(p)} to {_lower_util(p)}"
    if where == "unknown":
        fix = (f"CUDA ran out of memory{detail} at a point the log does not show: {others}if it was while "
               f"loading the weights (no \"Model loading took\" line before it), raise "
               f"server.tensor_parallel_size or use a smaller or quantized model; if it was after, set "
               f"server.enforce_eager = true, lower server.max_num_seqs or server.max_num_batched_tokens, or {lower}"
               f"{fp32}")
        return Failure("oom_unknown", msg.strip(), fix)
    if where == "graphs":
        fix = (f"CUDA graph capture ran out of memory{detail}: {others}set server.enforce_eager = true, "
               f"or {lower}")
    elif where == "sampler":
        fix = (f"the sampler warm-up ran out of memory{detail}: {others}lower server.max_num_seqs "
               f"(e.g. 128), or {lower}")
    elif where == "serving":
        fix = (f"the server ran out of memory while serving{detail}: {others}lower server.max_num_seqs or "
               f"server.max_model_len, set server.enforce_eager = true, or {lower}")
    else:
        ml = p.info.get("max_model_len")
        ml_now = f", now {ml}" if ml else ""
        fix = (f"the profiling forward pass ran out of memory{detail}: {others}lower "
               f"server.max_num_batched_tokens (or server.max_model_len{ml_now}), set "
               f"server.enforce_eager = true, or {lower}")
    return Failure("oom_runtime", msg.strip(), fix)


_FREE_MEM = re.compile(r"\(([\d.]+)/([\d.]+) GiB\) on startup is less than [^(]*\(([\d.]+), ([\d.]+) GiB\)")


def _mem_in_use(p: ParseState, msg: str) -> Failure | None:
    m = _FREE_MEM.search(msg)
    if m:
        free, total, util, req = (float(x) for x in m.groups())
        fix = (f"only {_fmt(free)} of {_fmt(total)} GiB is free on the GPU but server.gpu_memory_utilization = "
               f"{_fmt(util)} asks for {_fmt(req)} GiB: another process holds the rest; stop it, or set "
               f"server.gpu_memory_utilization = {_fraction_that_fits(free, total)}")
    elif "Error in memory profiling" in msg:
        fix = ("GPU memory used by other processes changed while vLLM profiled: run vLLM alone on the GPU "
               "(stop the other processes), or lower server.gpu_memory_utilization")
    else:
        return None
    return Failure("memory_in_use", msg.strip(), fix)


_CPU_MEM = re.compile(r"\(([\d.]+)/([\d.]+) GiB\) on startup is less than desired CPU memory utilization "
                      r"\(([\d.]+), ([\d.]+) GiB\)")


def _cpu_mem(p: ParseState, msg: str) -> Failure | None:
    m = _CPU_MEM.search(msg)
    if not m:
        return None if "CPU memory" not in msg else Failure(
            "cpu_memory", msg.strip(), "lower server.gpu_memory_utilization (on the CPU backend it is the "
                                       "fraction of RAM vLLM reserves) or free RAM")
    avail, total, util, req = (float(x) for x in m.groups())
    return Failure("cpu_memory", msg.strip(),
                   f"only {_fmt(avail)} of {_fmt(total)} GiB RAM is available but server.gpu_memory_utilization = "
                   f"{_fmt(util)} (on the CPU backend: the fraction of RAM to reserve) asks for {_fmt(req)} GiB: "
                   f"set server.gpu_memory_utilization = {_fraction_that_fits(avail, total)}, or free RAM")


CPU_KV = re.compile(r"\(([\d.]+)/([\d.]+) GiB\) on kv cache allocation is less than requested memory for kv "
                    r"\((-?[\d.]+)/([\d.]+) GiB\)")


def cpu_utilization_floor(consumed_gib: float, total_gib: float) -> float | None:
    """The least utilization that leaves the CPU worker a KV cache: what it already holds, plus half again (at
    least 0.25 GiB) for what the profile run and the cache's own tensors add, over the RAM vLLM counts."""
    return (consumed_gib + max(0.25, consumed_gib / 2)) / total_gib if total_gib > 0 else None


def _cpu_kv(p: ParseState, msg: str) -> Failure | None:
    """vLLM's CPU worker: the KV cache gets utilization x RAM minus what the worker already holds
    (vllm/v1/worker/cpu_worker.py determine_available_memory); <= 0 or more than is free fails."""
    m = CPU_KV.search(msg)
    if not m:
        return None
    avail, total, for_kv, requested = (float(x) for x in m.groups())
    if for_kv > 0:  # asked for more than is free
        return Failure("cpu_memory", msg.strip(),
                       f"only {_fmt(avail)} of {_fmt(total)} GiB RAM is available for a {_fmt(for_kv)} GiB KV cache: "
                       f"set server.gpu_memory_utilization = {_fraction_that_fits(avail, total)}, or free RAM")
    consumed = requested - for_kv
    floor = cpu_utilization_floor(consumed, total)
    need = math.ceil(floor * 100) / 100 if floor is not None else None
    return Failure("no_cache_memory", msg.strip(),
                   f"the worker already holds {consumed:.2f} GiB, more than the {requested:.2f} GiB that "
                   f"server.gpu_memory_utilization{_util_now(p)} reserves on the CPU backend (the fraction of "
                   f"{_fmt(total)} GiB RAM): nothing is left for the KV cache; raise server.gpu_memory_utilization"
                   + (f" to {_fmt(need)} or more" if need else ""))


_BIND_RANKS = re.compile(r"threads of (\d+) local CPUWorkers|local world size (\d+)")


def _cpu_bind(p: ParseState, msg: str) -> Failure | None:
    """vLLM's CPU build could not bind its workers' OpenMP threads (vllm/utils/ompmultiprocessing.py):
    "auto" needs a NUMA node per worker; a manual list needs one entry per worker."""
    m = _BIND_RANKS.search(msg)
    n = int(m.group(1) or m.group(2)) if m else 2
    example = "|".join(str(i) for i in range(n))
    return Failure("cpu_binding", msg.strip(),
                   f'give each of the {n} CPU workers its own cores: VLLM_CPU_OMP_THREADS_BIND = "{example}" in '
                   f'[server.env] (one core list per rank, ranks split by "|", e.g. "0-3|4-7"; vLLM\'s "auto" '
                   f"needs a NUMA node per rank), or remove VLLM_CPU_OMP_THREADS_BIND from [server.env] and "
                   f"qwen-tui sets it from the cores it may use; or lower server.tensor_parallel_size")


def _dead(p: ParseState, msg: str) -> Failure | None:
    return Failure("engine_dead", msg.strip(), ENGINE_DEAD_FIX)


ENGINE_DEAD_FIX = ("the engine process died after it had started (the error above it says why): restart the "
                   "server; if it ran out of memory while serving, lower server.max_num_seqs or "
                   "server.max_model_len")

Handler = Callable[[ParseState, str], "Failure | None"]

# Order matters only where one line carries two signatures (first match wins).
HARD: tuple[tuple[str, Handler], ...] = (
    ("KV cache is needed", _kv_v1),
    ("To serve at least one request", _kv_v1),
    ("can be stored in KV cache", _kv_v0),
    ("No available memory for the cache blocks", _no_cache),
    ("User-specified max_model_len", _max_len),
    ("out of memory", _oom),
    ("OutOfMemoryError", _oom),
    ("less than desired CPU memory", _cpu_mem),
    ("on kv cache allocation is less than", _cpu_kv),
    ("on startup is less than", _mem_in_use),
    ("Error in memory profiling", _mem_in_use),
    ("cannot open shared object file", _lib),
    ("No module named '", _module),
    ("provide the model as a positional argument", _positional_model),
    ("No space left on device", _shm),
    ("shared memory segment", _shm),
    ("posix_fallocate", _shm),
    ("peer access", _nccl),
    ("peer mapping", _nccl),
    ("NCCL error", _nccl),
    ("ncclSystemError", _nccl),
    ("ncclUnhandledCudaError", _nccl),
    ("ncclInternalError", _nccl),
    ("ncclInvalidUsage", _nccl),
    ("ncclRemoteError", _nccl),
    ("DistBackendError", _nccl),
    ("SafetensorError", _weights),
    ("Error while deserializing header", _weights),
    ("were not initialized from checkpoint", _weights),
    ("Cannot find any model weights", _weights),
    ("Repo id must be", _model),
    ("HFValidationError", _model),
    ("RepositoryNotFoundError", _model),
    ("Repository Not Found", _model),
    ("is not a valid model identifier", _model),
    ("Invalid repository ID or local directory", _model),
    ("does not appear to have a file named config.json", _model),
    ("ddress already in use", _port),
    ("EADDRINUSE", _port),
    (": error: ", _argparse),
    ("Bfloat16 is only supported", _bf16),
    ("must be divisible by tensor parallel size", _tp),
    ("Not enough allowed NUMA nodes", _cpu_bind),
    ("doesn't match local world size", _cpu_bind),
    ("EngineDeadError", _dead),
    ("Engine loop has died", _dead),
)

# Handlers whose figures come from one regex over the message. When a paste wraps the message the regex
# misses on the first line; joined with the next line(s) it matches, and the fix can name the numbers.
WRAPPED: dict[Handler, "re.Pattern[str]"] = {
    _max_len: _MAXLEN, _kv_v0: _KV_V0, _mem_in_use: _FREE_MEM, _cpu_mem: _CPU_MEM, _tp: _TP, _bf16: _BF16,
    _cpu_kv: CPU_KV, _port: _BIND, _lib: _LIB, _oom: _OOM_TOTAL, _module: _MODULE,
}


def rejoin(p: ParseState, handler: Handler, text: str, line: str) -> Failure | None:
    """The diagnosis of `text` with `line` joined on, if only the joined text reads whole."""
    rx = WRAPPED.get(handler)
    if rx is None or rx.search(text):
        return None
    for joined in (f"{text} {line}", text + line):  # wrapped at a space, or inside a word
        if rx.search(joined):
            return handler(p, joined)
    return None


def uncaught(p: ParseState, exc_line: str) -> Failure:
    """The log ends in a traceback no signature knows."""
    what = exc_line.split(":", 1)[0].strip() or "exception"
    return Failure("unknown", exc_line.strip(),
                   f"the log ends in an uncaught {what}: vLLM stopped there; read the exception line and the "
                   f"traceback above it")


# Kinds a later, more specific signature may replace (the first specific one otherwise wins).
REPLACEABLE: dict[str, frozenset[str] | None] = {
    "engine_dead": None,                      # anything explains a dead engine better
    "nccl_p2p": frozenset(("shm_too_small", "oom_loading", "oom_runtime")),
}

# Lines that say "startup failed, root cause above/below" without naming a cause.
WRAPPERS: tuple[str, ...] = (
    "EngineCore failed to start",
    "Engine core initialization failed",
    "Engine process failed to start",
    "WorkerProc failed to start",
    "WorkerProc hit an exception",
    "EngineCore hit an exception",
    "EngineCore encountered a fatal error",
    "Exception in worker",
    "Error executing method",
    "Engine core proc",
)

# Exception lines that only pass on a failure from elsewhere ("see root cause above"): never the root cause.
RETHROWN: tuple[str, ...] = ("EngineDeadError", "Executor failed", "See root cause above", "See stack trace (above)",
                             "root cause")
# Lines that are a root cause without being an exception: a process of the group vanished (kill -9, OOM killer).
DIED: tuple[str, ...] = ("died unexpectedly",)


def is_wrapper(line: str) -> bool:
    return any(k in line for k in WRAPPERS) or any(k in line for k in RETHROWN)


# Soft evidence: on WARNING lines (vLLM keeps going) or in traceback frames; used only when the
# process fails without a hard signature.
SOFT_WARN: tuple[tuple[str, str], ...] = (
    ("cannot open shared object file", "missing_cuda_library"),
    ("lacks GPU P2P capability", "nccl_p2p"),
    ("P2P test failed", "nccl_p2p"),
)
NCCL_FRAME_WORDS: tuple[str, ...] = ("device_communicators", "communication_op.py", "pynccl", "custom_all_reduce")


def soft_failure(p: ParseState, kind: str, msg: str) -> Failure:
    if kind == "missing_cuda_library":
        m = _LIB.search(msg)
        return Failure(kind, msg.strip(), lib_fix(m.group(1)) if m else "install the missing CUDA libraries")
    if kind == "nccl_p2p":
        return Failure(kind, msg.strip(), NCCL_FIX)
    if kind == "engine_dead":
        return Failure(kind, msg.strip(), ENGINE_DEAD_FIX)
    return Failure(kind, msg.strip(), "see the log")
