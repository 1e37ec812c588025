"""Events the log parser emits, and the fixed vocabularies (phases, failure kinds).

Plain Python, no UI imports: the supervisor, the CLI and the TUI all consume these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

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

# The console's failure kinds. Every Failure.kind is one of these.
FAILURE_KINDS: tuple[str, ...] = (
    "kv_cache_too_small",
    "no_cache_memory",
    "max_len_exceeds_model",
    "oom_loading",
    "oom_runtime",
    "memory_in_use",
    "cpu_memory",
    "missing_cuda_library",
    "nccl_p2p",
    "shm_too_small",
    "weights_incomplete",
    "model_not_found",
    "port_in_use",
    "bad_argument",
    "bf16_unsupported",
    "tp_indivisible",
    "engine_dead",
    "unknown",
)


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
    config.toml terms (server.max_model_len, [server.env] NCCL_P2P_DISABLE, ...)."""

    kind: str
    message: str
    fix: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message, "fix": self.fix}


Event = Union[Milestone, Figure, Failure]
