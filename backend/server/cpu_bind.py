"""OpenMP thread binding for vLLM's CPU build with more than one worker (tensor/pipeline parallel).

vLLM's CPU workers bind their OpenMP threads from VLLM_CPU_OMP_THREADS_BIND (default "auto"). "auto"
gives rank N the cores of the N-th allowed NUMA node, and asserts there are at least as many nodes as
local workers (vllm/utils/ompmultiprocessing.py, _get_autobind_cpu_ids): a laptop or a small VM has
one node, so TP=2 dies at start with "Not enough allowed NUMA nodes to bind threads of 2 local
CPUWorkers". A manual binding ("0|1": one core list per rank, ranks split by "|") works anywhere.

So when the server runs on the CPU with more workers than NUMA nodes, and the user did not set the
binding in [server.env], qwen-tui sets it from the cores this process may use (sched_getaffinity,
which a cpuset or `taskset` narrows): the same number of cores per rank, cores left over stay free
for the API server and the engine process. Fewer usable cores than ranks is refused before launch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ENV = "VLLM_CPU_OMP_THREADS_BIND"
_NODES = Path("/sys/devices/system/node")


def world_size(server: dict[str, Any]) -> int:
    """Workers on this machine: tensor parallel x pipeline parallel."""
    def size(key: str) -> int:
        v = server.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 1

    return size("tensor_parallel_size") * size("pipeline_parallel_size")


def usable_cores() -> list[int]:
    """The cores this process (and so the server it starts) may run on, sorted."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux: every core the OS reports
        return list(range(os.cpu_count() or 1))


def _ids(text: str) -> set[int]:
    """"0-3,8" -> {0, 1, 2, 3, 8} (the kernel's cpulist format)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def numa_nodes(cores: list[int], root: Path = _NODES) -> int:
    """NUMA nodes holding any of `cores` (what vLLM's auto binding counts); 1 when sysfs says nothing."""
    wanted, found = set(cores), 0
    try:
        for node in root.glob("node[0-9]*"):
            try:
                if _ids((node / "cpulist").read_text()) & wanted:
                    found += 1
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return max(found, 1)


def _ranges(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (vLLM parses both forms)."""
    out, i = [], 0
    while i < len(cores):
        j = i
        while j + 1 < len(cores) and cores[j + 1] == cores[j] + 1:
            j += 1
        out.append(str(cores[i]) if i == j else f"{cores[i]}-{cores[j]}")
        i = j + 1
    return ",".join(out)


def binding(cores: list[int], ranks: int) -> str:
    """The same number of cores per rank, in order: 2 cores, 2 ranks -> "0|1"; 8 and 2 -> "0-3|4-7"."""
    per = len(cores) // ranks
    return "|".join(_ranges(cores[r * per:(r + 1) * per]) for r in range(ranks))


def plan(server: dict[str, Any], user_env: dict[str, str], cores: list[int] | None = None,
         nodes: int | None = None) -> tuple[dict[str, str], str | None]:
    """(environment to add, problem) for a CPU launch of these [server] settings. Nothing when there is
    one worker, the user set the binding, or vLLM's auto binding has a NUMA node per worker."""
    ranks = world_size(server)
    if ranks < 2 or ENV in user_env:
        return {}, None
    cores = usable_cores() if cores is None else cores
    if len(cores) < ranks:
        n = len(cores)
        return {}, (f"server.tensor_parallel_size = {server.get('tensor_parallel_size')} needs {ranks} CPU "
                    f"workers, one core each at least, but this process may use {n} core{'s' if n != 1 else ''} "
                    f"({_ranges(cores) or 'none'}): set server.tensor_parallel_size = {max(n, 1)}, or run on "
                    f"a machine (or cpuset / taskset) with at least {ranks} cores")
    if (numa_nodes(cores) if nodes is None else nodes) >= ranks:
        return {}, None  # vLLM's "auto" puts each rank on its own node: better than one list here
    return {ENV: binding(cores, ranks)}, None


def launch_env(server: dict[str, Any], user_env: dict[str, str]) -> dict[str, str]:
    """[server.env] with the binding a CPU launch adds (backend.server.launch.build_launch): what vLLM will see,
    for the ledger to plan each rank's node and threads from."""
    return {**plan(server, user_env)[0], **user_env}
