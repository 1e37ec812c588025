"""Figure/milestone handlers: (key substring, handler) pairs tried in order on INFO-ish lines.

A handler gets (parser, message, rank, t, events). The first key found in a line wins, so keys that
may share a line with another key come first (the 0.28+ combined "KV cache size ..., Maximum
concurrency ..." line is handled by the KV-size handler).
"""

from __future__ import annotations

from typing import Any, Callable

from backend.logparse import patterns
from backend.logparse.events import Event, Figure
from backend.logparse.handler import ParseState

_INT_INFO = frozenset(("port", "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "block_size",
                       "max_num_seqs", "max_num_batched_tokens", "max_seq_len"))
_FLOAT_INFO = frozenset(("gpu_memory_utilization",))


def _info(p: ParseState, key: str, raw: str | None) -> None:
    if raw is None or raw in ("None", "null", ""):
        return
    try:
        if key == "max_seq_len":
            key = "max_model_len"
            p.info[key] = int(raw)
        elif key in _INT_INFO:
            p.info[key] = int(raw)
        elif key in _FLOAT_INFO:
            p.info[key] = float(raw)
        elif key == "enforce_eager":
            p.info[key] = raw == "True"
        else:
            p.info[key] = raw
    except ValueError:
        pass


def _kv_tokens(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.KV_TOKENS.search(msg)
    if m:
        # TP=N may print one line per worker: the engine allocates the smallest (the cache is unified)
        p.kv_token_lines.append(int(m.group(1).replace(",", "")))
        p.record_figure("kv_cache_tokens", min(p.kv_token_lines), None, ev)
        p.set_engine("v1", "strong", ev)
        p.to_phase("kv_cache", t, ev)
    if "Maximum concurrency for" in msg:
        _concurrency(p, msg, rank, t, ev)


def _concurrency(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.CONCURRENCY.search(msg)
    if m:
        x, tokens = float(m.group(2)), int(m.group(1).replace(",", ""))
        cur = p.figures.get("max_concurrency")
        if p.figures.get("max_concurrency_tokens") == tokens and isinstance(cur, float) and cur < x:
            x = cur  # one line per worker: the smallest binds, like the KV cache size
        p.record_figure("max_concurrency", x, None, ev)
        p.record_figure("max_concurrency_tokens", tokens, None, ev)
        p.to_phase("kv_cache", t, ev)


def _num_gpu_blocks(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    """`num_gpu_blocks is: N`: the blocks the engine allocates (the minimum over the workers)."""
    m = patterns.NUM_GPU_BLOCKS.search(msg)
    if m:
        blocks = int(m.group(1))
        cur = p.figures.get("gpu_blocks")
        p.record_figure("gpu_blocks", min(blocks, cur) if isinstance(cur, int) else blocks, None, ev)
        if not p.kv_token_lines:
            p.record_figure("kv_cache_tokens", p.figures["gpu_blocks"] * (p.info.get("block_size") or 16), None, ev)
        p.to_phase("kv_cache", t, ev)


def _avail_kv(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.AVAIL_KV.search(msg)
    if m:
        p.set_rank_figure("kv_cache_gib", float(m.group(1)), rank, ev)
        p.set_engine("v1", "strong", ev)
        p.to_phase("kv_cache", t, ev)


def _blocks(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.BLOCKS.search(msg)
    if not m:
        return
    blocks = int(m.group(2))
    p.record_figure("gpu_blocks", blocks, None, ev)
    p.record_figure("kv_cache_tokens", blocks * (p.info.get("block_size") or 16), None, ev)
    if m.group(3) is not None:
        p.record_figure("cpu_blocks", int(m.group(3)), None, ev)
        p.set_engine("v0", "strong", ev)
    else:
        p.set_engine("v1", "strong", ev)
    p.to_phase("kv_cache", t, ev)


def _memprof64(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.MEMPROF64.search(msg)
    if m:
        p.record_figure("total_gpu_gib", float(m.group(1)), None, ev)
        if m.group(3):
            _info(p, "gpu_memory_utilization", m.group(3))
            p.set_rank_figure("requested_gib", round(float(m.group(1)) * float(m.group(3)), 2), rank, ev)
        t2 = patterns.MEMPROF64_TERMS.search(msg)
        if t2:
            p.set_rank_figure("initial_usage_gib", float(t2.group(1)), rank, ev)
            p.set_rank_figure("peak_torch_gib", float(t2.group(2)), rank, ev)
            p.set_rank_figure("non_torch_gib", float(t2.group(3)), rank, ev)
        p.set_rank_figure("kv_cache_gib", float(m.group(2)), rank, ev)
        p.set_engine("v0", "strong", ev)
        p.to_phase("kv_cache", t, ev)


def _memprof_total(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.MEMPROF_TOTAL.search(msg)
    if m:
        p.record_figure("total_gpu_gib", float(m.group(1)), None, ev)
        _info(p, "gpu_memory_utilization", m.group(2))
        if m.group(3):
            p.set_rank_figure("requested_gib", float(m.group(3)), rank, ev)


def _memprof_kv(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    """V0 0.6.6-0.10: `model weights take 7.51GiB; non_torch_memory takes 0.14GiB; PyTorch activation peak
    memory takes 1.25GiB; the rest of the memory reserved for KV Cache is 10.11GiB.` (once per worker)."""
    m = patterns.MEMPROF_KV.search(msg)
    if m:
        r = 0 if rank is None else rank
        if r not in p.rank_figures.get("weights_gib", {}):  # "Loading model weights took" gives it too
            p.set_rank_figure("weights_gib", float(m.group(1)), rank, ev)
        if m.group(2) is not None:
            p.set_rank_figure("non_torch_gib", float(m.group(2)), rank, ev)
        if m.group(3) is not None:
            p.set_rank_figure("activation_peak_gib", float(m.group(3)), rank, ev)
        p.weights_done = True
        p.set_rank_figure("kv_cache_gib", float(m.group(4)), rank, ev)
        p.set_engine("v0", "strong", ev)
        p.to_phase("kv_cache", t, ev)


def _cpu_kv(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.CPU_KV.search(msg)
    if m:
        p.set_rank_figure("kv_cache_gib", float(m.group(2)), rank, ev)
        p.record_figure("kv_cache_budget_gib", float(m.group(3)), None, ev)  # the node's memory (name kept)
        p.set_rank_figure("node_total_gib", float(m.group(3)), rank, ev)
        if m.group(4) is not None:
            p.set_rank_figure("numa_node", int(m.group(4)), rank, ev)
        if m.group(5) is not None:
            p.set_rank_figure("requested_gib", float(m.group(5)), rank, ev)
            p.set_rank_figure("non_kv_gib", float(m.group(6)), rank, ev)
        p.to_phase("kv_cache", t, ev)


def _breakdown(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    """vLLM's own memory breakdown (one line per worker; DEBUG before 0.32, INFO from 0.32)."""
    m = patterns.FREE_ON_START.search(msg)
    if m:
        p.set_rank_figure("device_free_gib", float(m.group(1)), rank, ev)
        p.set_rank_figure("device_total_gib", float(m.group(2)), rank, ev)
    m = patterns.DESIRED_UTIL.search(msg)
    if m:
        _info(p, "gpu_memory_utilization", m.group(1))
        p.set_rank_figure("requested_gib", float(m.group(2)), rank, ev)
    m = patterns.USAGE_WEIGHT.search(msg)
    if m:
        p.set_rank_figure("breakdown_weights_gib", float(m.group(1)), rank, ev)
        p.set_rank_figure("activation_peak_gib", float(m.group(2)), rank, ev)
        p.set_rank_figure("non_torch_gib", float(m.group(3)), rank, ev)
        p.set_rank_figure("cuda_graph_memory_gib", float(m.group(4)), rank, ev)
        p.set_rank_figure("consumed_gib", round(float(m.group(1)) + float(m.group(3)), 2), rank, ev)
    m = patterns.USAGE_CONSUMED.search(msg)
    if m:
        p.set_rank_figure("consumed_gib", float(m.group(1)), rank, ev)
        p.set_rank_figure("activation_peak_gib", float(m.group(2)), rank, ev)
        p.set_rank_figure("cuda_graph_memory_gib", float(m.group(3)), rank, ev)
    m = patterns.KV_SUGGEST.search(msg)
    if m:
        p.set_rank_figure("kv_cache_memory_to_requested", int(m.group(1)), rank, ev)
        p.set_rank_figure("kv_cache_memory_to_gpu", int(m.group(2)), rank, ev)
    m = patterns.KV_IN_USE.search(msg)
    if m:
        v = float(m.group(1))
        p.set_rank_figure("kv_cache_in_use_gib", round(v / (1 << 30), 2) if m.group(2) == "bytes" else v, rank, ev)


def _auto_fit(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.AUTO_FIT.search(msg)
    if m:
        if m.group(1):
            p.record_figure("auto_fit_from", int(m.group(1)), None, ev)
            p.info["max_model_len"] = int(m.group(2))
            p.record_figure("max_model_len", int(m.group(2)), None, ev)
        else:
            p.record_figure("auto_fit_from", int(m.group(3)), None, ev)
            p.record_figure("max_model_len", int(m.group(3)), None, ev)
        p.record_figure("auto_fit", True, None, ev)


def _startup_plan(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.PLAN_APPLIED.search(msg)
    if m:
        p.record_figure("startup_plan_applied", m.group(1), None, ev)
        p.set_rank_figure("startup_plan_kv_bytes", int(m.group(2)), rank, ev)
    m = patterns.PLAN_SAVED.search(msg)
    if m:
        p.record_figure("startup_plan_saved", m.group(1).rstrip("."), None, ev)


def _weights(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.WEIGHTS.search(msg)
    if m:
        p.set_rank_figure("weights_gib", float(m.group(1)), rank, ev)
        p.set_rank_figure("weights_seconds", float(m.group(2)), rank, ev)
        p.weights_done = True
        p.to_phase("profiling", t, ev)


def _weights_old(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.WEIGHTS_OLD.search(msg)
    if m:
        p.set_rank_figure("weights_gib", float(m.group(1)), rank, ev)
        p.weights_done = True
        p.to_phase("profiling", t, ev)


def _load_read(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.LOAD_READ.search(msg)
    if m:
        secs = float(m.group(1))
        p.set_rank_figure("weights_read_seconds", secs, rank, ev)
        r = 0 if rank is None else rank
        if r not in p.rank_figures.get("weights_seconds", {}):
            p.set_rank_figure("weights_seconds", secs, rank, ev)
        p.to_phase("loading_weights", t, ev)


def _shards(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.SHARDS.search(msg)
    if m:
        p.record_figure("shards_loaded", int(m.group(2)), None, ev)
        p.record_figure("shards_total", int(m.group(3)), None, ev)
        p.to_phase("loading_weights", t, ev)


def _start_load(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    p.to_phase("loading_weights", t, ev)


def _graph_done(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.GRAPH_DONE.search(msg)
    if m:
        p.to_phase("cuda_graphs", t, ev)
        p.set_rank_figure("cuda_graph_seconds", float(m.group(1)), rank, ev)
        if m.group(2):
            p.set_rank_figure("cuda_graph_gib", float(m.group(2)), rank, ev)


def _capturing(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    p.to_phase("cuda_graphs", t, ev)
    if "|" in msg:
        m = patterns.GRAPH_BAR.search(msg)
        if m:  # one bar per kind of graph (PIECEWISE, FULL): the count is the sum of what each captured
            bars = p.graph_bars
            bars[m.group(1)] = max(bars.get(m.group(1), 0), int(m.group(2)))
            p.record_figure("cuda_graph_count", sum(bars.values()), None, ev)


def _graph_est(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.GRAPH_EST.search(msg)
    if m:
        p.record_figure("cuda_graph_estimate_gib", float(m.group(1)), None, ev)


def _compile_cache(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    """Whether this start found torch.compile's cache (warm) or built it (cold), and vLLM's cache key."""
    if msg.startswith("Using cache directory"):
        m = patterns.COMPILE_CACHE_DIR.search(msg)
        if m:
            p.record_figure("compile_cache_dir", m.group(1), None, ev)
            p.record_figure("compile_cache_key", m.group(2), None, ev)
    elif msg.startswith("Directly load the compiled graph"):
        p.record_figure("compile_cache", "warm", None, ev)
    elif msg.startswith("Compiling a graph for"):
        p.record_figure("compile_cache", "cold", None, ev)
    p.to_phase("profiling", t, ev)


def _init_engine(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.INIT_ENGINE.search(msg)
    if m:
        p.record_figure("init_engine_seconds", float(m.group(1)), None, ev)


def _compile_total(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.COMPILE_TOTAL.search(msg)
    if m:
        p.set_rank_figure("compile_seconds", float(m.group(1)), rank, ev)
        p.to_phase("profiling", t, ev)


def _dynamo(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.DYNAMO.search(msg)
    if m:
        p.set_rank_figure("dynamo_seconds", float(m.group(1)), rank, ev)
        p.to_phase("profiling", t, ev)


def _warming_up(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    if p.weights_done or p.phase == "loading_weights":
        p.to_phase("profiling", t, ev)


def _ready(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    if msg.startswith("Application startup complete"):
        p.to_phase("ready", t, ev)


def _listen(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.LISTEN.search(msg)
    if m:
        p.record_figure("listen_url", m.group(1).rstrip(".,"), None, ev)


def _uvicorn_run(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.UVICORN_RUN.search(msg)
    if m:
        url = m.group(1) or f"http://{m.group(2) or '0.0.0.0'}:{m.group(3)}"
        p.record_figure("listen_url", url, None, ev)


def _engine_init(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.ENGINE_INIT.search(msg)
    if not m:
        return
    p.set_engine("v1" if m.group(1) == "V1" else "v0", "explicit", ev)
    if p.vllm_version is None:
        p.set_version(m.group(2), ev)
    for cm in patterns.CFG.finditer(msg, m.end()):
        key = cm.group(1)
        _info(p, key, cm.group(2) if cm.group(2) is not None else (cm.group(3) or cm.group(4)))
    if "max_model_len" in p.info:
        p.record_figure("max_model_len", p.info["max_model_len"], None, ev)
    if "model" in p.info:
        p.record_figure("model", p.info["model"], None, ev)


def _version(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.VERSION_API.search(msg)
    if m:
        p.set_version(m.group(1), ev)
        return
    if "\u2588" in msg or "\u2580" in msg or "\u2584" in msg:  # the 0.16+ ASCII logo
        m = patterns.VERSION_LOGO.search(msg)
        if m:
            p.set_version(m.group(1), ev)


def _logo_model(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    if "\u2588" in msg:
        m = patterns.MODEL_LOGO.search(msg)
        if m:
            p.info.setdefault("model", m.group(1))
            p.record_figure("model", m.group(1), None, ev)


def _args(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    for m in patterns.ARG.finditer(msg):
        raw = m.group(2) if m.group(2) is not None else (m.group(3) if m.group(3) is not None else m.group(4))
        _info(p, m.group(1), raw)


def cmdline(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    """A pasted shell command line: `vllm serve MODEL --max-model-len 60000 ...`."""
    for m in patterns.CMD_FLAG.finditer(msg):
        key = m.group(1).replace("-", "_")
        if key in patterns.CMD_KEYS:
            _info(p, key, m.group(2))


def _maxlen(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.MAXLEN.search(msg)
    if m:
        p.info["max_model_len"] = int(m.group(1))
        p.record_figure("max_model_len", int(m.group(1)), None, ev)


def _batched(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.BATCHED.search(msg)
    if m:
        p.record_figure("max_num_batched_tokens", int(m.group(1)), None, ev)


def _architecture(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.ARCH.search(msg)
    if m:
        p.record_figure("architecture", m.group(1), None, ev)


def _ray(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    p.record_figure("executor", "ray", None, ev)


def _wsl(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    p.record_figure("wsl", True, None, ev)


def _stats(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    m = patterns.STATS.search(msg)
    if m:
        p.record_figure("prompt_throughput", float(m.group(1)), None, ev)
        p.record_figure("generation_throughput", float(m.group(2)), None, ev)
        p.record_figure("requests_running", int(m.group(3)), None, ev)
        p.record_figure("requests_waiting", int(m.group(4)), None, ev)
        if m.group(5) is not None:
            p.record_figure("kv_cache_usage_pct", float(m.group(5)), None, ev)


def _shutting_down(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    if msg.startswith("Shutting down") and p.was_ready:
        p.stopping = True


def _signal_stop(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    """0.2x: `[shutdown] EngineCore: trigger received signal=SIGTERM`: a stop was asked for, so the
    EngineDeadError the API server logs while it tears down is no failure."""
    if "signal=SIGTERM" in msg or "signal=SIGINT" in msg:
        p.stopping = True


def _shutdown_done(p: ParseState, msg: str, rank: Any, t: Any, ev: list[Event]) -> None:
    if msg.startswith("Application shutdown complete") and p.phase != "failed":
        p.stopping = True
        p.to_phase("stopped", t, ev)


Handler = Callable[[ParseState, str, Any, Any, list[Any]], None]

FIGURE_TABLE: tuple[tuple[str, Handler], ...] = (
    ("KV cache size:", _kv_tokens),
    ("Maximum concurrency for ", _concurrency),
    ("Available KV cache memory:", _avail_kv),
    (" blocks: ", _blocks),
    ("num_gpu_blocks is: ", _num_gpu_blocks),
    ("Memory profiling results", _memprof64),
    ("total_gpu_memory (", _memprof_total),
    ("reserved for KV Cache is", _memprof_kv),
    ("Free memory on device (", _breakdown),
    ("Actual usage is ", _breakdown),
    ("Auto-fit max_model_len", _auto_fit),
    ("startup plan", _startup_plan),
    ("Auto set (", _cpu_kv),
    ("Explicitly set (", _cpu_kv),
    ("Model loading took", _weights),
    ("Loading model weights took", _weights_old),
    ("Loading weights took", _load_read),
    ("checkpoint shards", _shards),
    ("Starting to load model", _start_load),
    ("Graph capturing finished", _graph_done),
    ("Capturing CUDA graph", _capturing),
    ("Capturing cudagraphs", _capturing),
    ("Capturing the model for CUDA graphs", _capturing),
    ("Estimated CUDA graph memory", _graph_est),
    ("init engine (profile", _init_engine),
    ("Using cache directory: ", _compile_cache),
    ("Directly load the compiled graph", _compile_cache),
    ("Compiling a graph for ", _compile_cache),
    ("torch.compile t", _compile_total),
    ("Dynamo bytecode transform time", _dynamo),
    ("Warming up model", _warming_up),
    ("Application startup complete", _ready),
    ("Starting vLLM", _listen),
    ("Uvicorn running on", _uvicorn_run),
    ("LLM engine (v", _engine_init),
    ("version", _version),
    ("  model  ", _logo_model),
    ("args: ", _args),
    ("Using max model len", _maxlen),
    ("vllm serve ", cmdline),
    ("vllm.entrypoints.openai.api_server ", cmdline),
    ("max_num_batched_tokens=", _batched),
    ("Avg prompt throughput", _stats),
    ("Resolved architecture", _architecture),
    ("local Ray instance", _ray),
    ("as WSL is", _wsl),
    ("Shutting down", _shutting_down),
    ("Application shutdown complete", _shutdown_done),
    ("received signal=SIG", _signal_stop),
)

# Figure lines whose number or unit a hard wrap may cut: held for one line when they gave no figure, or when
# they stop short of their end (COMPLETE_ENDS).
COMPLETE_ENDS = (".", "GiB", "tokens", "x", ")", "s", "B")
HOLD_KEYS = frozenset(("KV cache size:", "Maximum concurrency for ", "Available KV cache memory:", " blocks: ",
                       "num_gpu_blocks is: ", "Auto set (", "Explicitly set (", "Free memory on device (",
                       "Actual usage is ", "Model loading took", "Loading model weights took",
                       "reserved for KV Cache is", "Memory profiling results"))


def join_held(p: ParseState, held: tuple[Any, ...], msg: str, ev: list[Event]) -> bool:
    """A figure line a hard wrap cut (in a number, a unit or between words) and its rest on this bare line:
    joined as the terminal cut it (no space), else with one space; kept when it says more than the cut line."""
    handler, text, rank, t, before = held
    for joined in (text + msg, text.rstrip() + " " + msg.strip()):
        trial: list[Event] = []
        handler(p, joined, rank, t, trial)
        if {e.name for e in trial if isinstance(e, Figure)} - before:
            ev.extend(trial)
            return True
    return False  # (a trial that says nothing new only set the same figures to the same values)
