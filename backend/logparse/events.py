"""Events the log parser emits, and the fixed vocabularies (phases, failure kinds).

Plain Python, no UI imports: the supervisor, the CLI and the TUI all consume these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

# Startup phases in the order vLLM goes through them, then the two terminal phases.
PHASES: tuple[str, ...] = (
    "starting",         # process up, config/args, engine init line
    "loading_weights",  # "Starting to load model", checkpoint shard bars
    "profiling",        # weights loaded; dummy forward pass / torch.compile / memory profiling
    "kv_cache",         # KV cache sized ("Available KV cache memory", "# GPU blocks", "KV cache size")
    "cuda_graphs",      # CUDA graph capture
    "ready",            # "Application startup complete."
    "failed",
    "stopped",
)
PROGRESS_PHASES: tuple[str, ...] = PHASES[:6]
TERMINAL_PHASES: frozenset[str] = frozenset(("failed", "stopped"))
PHASE_INDEX: dict[str, int] = {p: i for i, p in enumerate(PROGRESS_PHASES)}

# The console's failure kinds, each with what a restart with the same settings would do (the
# supervisor's "never restart" rule reads this through PERMANENT_KINDS / is_permanent):
#   "permanent": fails the same way every time (the settings, the model files or the install are wrong);
#   "startup":   the same when it happened while the server started (profiling, graph capture and NCCL set-up
#                are deterministic for given settings), but maybe a one-off once it had served;
#   "transient": may clear by itself (another process lets go of the port or the memory, a crash).
RESTART: dict[str, str] = {
    "kv_cache_too_small": "permanent",     # max_model_len needs more KV memory than the budget leaves
    "no_cache_memory": "permanent",        # weights + activations exceed the budget: 0 (or < 0) GiB for the cache
    "max_len_exceeds_model": "permanent",  # max_model_len > the model's max_position_embeddings
    "oom_loading": "permanent",            # the weights do not fit on the GPUs
    "oom_runtime": "startup",              # profiling / sampler warm-up / graph capture, or while serving
    "memory_in_use": "transient",          # other processes hold GPU memory (e.g. an old server being reaped)
    "cpu_memory": "transient",             # RAM free now < the share asked for: depends on other processes
    "missing_cuda_library": "permanent",   # the install lacks a CUDA library
    "nccl_p2p": "startup",                 # P2P / NCCL set-up fails the same way; a runtime NCCL error may not
    "shm_too_small": "permanent",          # /dev/shm keeps its size (and leaked segments) across restarts
    "weights_incomplete": "permanent",     # a truncated or missing weight file
    "model_not_found": "permanent",        # server.model is not a directory or a repo id
    "port_in_use": "transient",            # the process holding the port may exit (an older server stopping)
    "bad_argument": "permanent",           # vllm serve rejects its arguments
    "bf16_unsupported": "permanent",       # the GPU cannot run bfloat16
    "tp_indivisible": "permanent",         # the heads do not split over tensor_parallel_size GPUs
    "not_generating": "transient",         # READY, but a 2-token completion did not come back (server/health.py)
    "cpu_binding": "permanent",            # the CPU build cannot bind each worker's threads (VLLM_CPU_OMP_THREADS_BIND)
    "engine_dead": "transient",            # the engine died after it had started
    "oom_unknown": "startup",              # an OOM the log does not place (no load/profile/capture evidence)
    "missing_python_module": "permanent",  # the server's interpreter lacks a Python module
    "unknown": "transient",                # no known signature: restart with backoff, capped by the supervisor
}
FAILURE_KINDS: tuple[str, ...] = tuple(RESTART)
# Kinds that always come back unchanged on a restart with the same settings.
PERMANENT_KINDS: frozenset[str] = frozenset(k for k, v in RESTART.items() if v == "permanent")
# Kinds that come back unchanged when they happened before the server was first ready.
PERMANENT_AT_STARTUP: frozenset[str] = frozenset(k for k, v in RESTART.items() if v in ("permanent", "startup"))


def is_permanent(kind: str | None, was_ready: bool = False) -> bool:
    """Whether a restart with the same settings would fail the same way: never restart then.
    `was_ready`: the failed launch had been ready (served) before it failed."""
    return kind in (PERMANENT_KINDS if was_ready else PERMANENT_AT_STARTUP)


@dataclass(frozen=True, slots=True)
class Milestone:
    """The server entered `phase` at time `t` (the caller's clock, else the vLLM log time; None if neither)."""

    phase: str
    t: float | None


@dataclass(frozen=True, slots=True)
class Figure:
    """A number (or string) read from the log. `rank` is the TP worker it came from, None for
    engine-wide figures (KV tokens, concurrency, version, URL, ...)."""

    name: str
    value: object
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    """A diagnosis: `kind` (one of FAILURE_KINDS), the vLLM line that shows it, and the fix in
    config.toml terms (server.max_model_len, [server.env] NCCL_P2P_DISABLE, ...). `context`: the
    wrapper lines ("Engine core initialization failed ...") said after the root cause, kept as told."""

    kind: str
    message: str
    fix: str
    context: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "message": self.message, "fix": self.fix}
        if self.context:
            out["context"] = list(self.context)
        return out


Event = Union[Milestone, Figure, Failure]
