"""Plan in what is free now: does this plan fit beside the teammates' servers already running?

vLLM's gpu_memory_utilization is a fraction of the whole card (of the NUMA node's RAM on the CPU
build), not of what is free: another server's memory makes a start fail. The ledger says what the
plan asks for (its budget per GPU, or per rank on the CPU); this module holds that against what is
free now (NVML per GPU; available RAM on the CPU) and names whose server holds the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 2**30


@dataclass(frozen=True)
class Beside:
    fits: bool
    need_bytes: int  # what the plan asks for, on its fullest GPU (or in RAM, all ranks)
    free_bytes: int
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"fits": self.fits, "need_bytes": self.need_bytes, "free_bytes": self.free_bytes,
                "summary": self.text}


def verdict(need: int, free: int, servers: list[Any], what: str = "GiB") -> Beside | None:
    """None without teammates' servers; else whether ``need`` bytes fit in ``free`` beside them,
    in words: "fits beside alice's server on port 8011" or "needs 3.2 GiB that alice's server on
    port 8011 holds"."""
    if not servers:
        return None
    names = ", ".join(s.title() for s in servers)
    if need <= free:
        return Beside(True, need, free, f"fits beside {names} (needs {need / GIB:.1f} GiB, "
                                         f"{free / GIB:.1f} GiB free)")
    short = need - free
    holder = max(servers, key=lambda s: s.gpu_total or s.rss_bytes)
    return Beside(False, need, free, f"needs {short / GIB:.1f} GiB that {holder.title()} holds "
                                     f"({need / GIB:.1f} GiB asked for, {free / GIB:.1f} GiB free)")


def check(led: Any, servers: list[Any], monitor: Any = None) -> Beside | None:
    """The plan ``led`` (backend.ledger's) beside ``servers`` (owners.TeamServer): on the CPU the
    budget of every rank against available RAM; on GPUs the budget per GPU against the least free
    of the GPUs the plan uses (NVML)."""
    if not servers or led is None:
        return None
    if led.device == "cpu":
        import psutil  # only for a plan beside a teammate's server

        ranks = max(1, int(getattr(led, "tensor_parallel_size", 1) or 1))
        return verdict(int(led.budget_bytes_per_gpu) * ranks, int(psutil.virtual_memory().available), servers)
    if monitor is None or not monitor.available():
        return None
    samples = [s for s in monitor.sample() if s.memory_total_bytes and s.memory_used_bytes is not None]
    world = max(1, int(getattr(led, "tensor_parallel_size", 1) or 1) * int(getattr(led, "pipeline_parallel_size", 1)
                                                                             or 1))
    used = samples[:world]
    if not used:
        return None
    free = min(s.memory_total_bytes - s.memory_used_bytes for s in used)
    return verdict(int(led.budget_bytes_per_gpu), int(free), servers)
