"""The host's side of serving: CPU load, RAM, swap, and the RSS of the supervisor and its vLLM processes.

Why it matters: vLLM's level-1 sleep copies the weights into pinned host RAM (~28 GiB for a 14B in
bf16), so a box whose free RAM is smaller swaps or gets OOM-killed when `z` is pressed:
backend/server/sleep.py's `sleep_fit` says so before it happens, from the free RAM sampled here.
Plain, blocking Python (psutil): callers sample it from a thread.

Bounded: one sample reads /proc for at most PROCS_MOST processes of the server's tree (a TP=8 server
has ~10), never a scan of every process on the machine.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

PROCS_MOST = 16


@dataclass(frozen=True)
class ProcMem:
    pid: int
    role: str  # "supervisor", "api_server", "engine_core", "worker", "vllm", "other"
    rss_bytes: int | None


@dataclass(frozen=True)
class HostSample:
    at: float  # time.time()
    cpu_count: int
    load_1m: float | None
    cpu_percent: float | None  # all cores, since the previous sample (None on the first)
    ram_total_bytes: int
    ram_used_bytes: int
    ram_available_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int
    procs: list[ProcMem] = field(default_factory=list)
    procs_left_out: int = 0

    @property
    def server_rss_bytes(self) -> int:
        return sum(p.rss_bytes or 0 for p in self.procs if p.role != "supervisor")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["server_rss_bytes"] = self.server_rss_bytes
        return d


def server_pids(server_pid: int | None) -> list[int]:
    """The API server and its descendants (engine core, workers), sorted."""
    if not server_pid:
        return []
    from backend.server import procs  # psutil: only once a sample is taken

    return sorted({server_pid, *procs.descendants(server_pid)})


_last_cpu: tuple[float, float] | None = None  # (busy, total) CPU seconds at the previous sample


def _cpu_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the machine so far, as psutil.cpu_percent counts them."""
    import psutil  # start-up: the console's first frame does not need it

    t = psutil.cpu_times()
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # guest time is in user already
    idle = t.idle + getattr(t, "iowait", 0.0)
    return total - idle, total


def _busy_percent(a: tuple[float, float], b: tuple[float, float]) -> float | None:
    dt = b[1] - a[1]
    return round(max(0.0, min(100.0, (b[0] - a[0]) / dt * 100)), 1) if dt > 0 else None


def sample(supervisor_pid: int | None = None, server_pid: int | None = None,
           cpu_window_s: float | None = None) -> HostSample:
    """One reading. The supervisor's RSS and each vLLM process's, when their pids are given.
    CPU % is over the time since the previous sample (a poller's interval), or over cpu_window_s
    (blocking) for a one-off; the first sample has none. Not psutil.cpu_percent(None): it keeps its last
    reading per thread, and a poller's samples run on whichever thread is free (0.0 each time)."""
    import psutil  # start-up: the console's first frame does not need it

    global _last_cpu

    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:
        load = None
    if cpu_window_s:
        _last_cpu = _cpu_seconds()
        time.sleep(cpu_window_s)  # a one-off reading (`qwen-tui host`): a window to measure over
    now_cpu = _cpu_seconds()
    cpu = _busy_percent(_last_cpu, now_cpu) if _last_cpu is not None else None
    if cpu is not None or _last_cpu is None:
        _last_cpu = now_cpu  # else no clock tick since: keep the old mark so the next window is longer
    pids = ([supervisor_pid] if supervisor_pid else []) + [p for p in server_pids(server_pid) if p != supervisor_pid]
    shown: list[ProcMem] = []
    from backend.server import procs  # with psutil: only once a sample is taken

    for pid in pids[:PROCS_MOST]:
        info = procs.process_info(pid)  # its role from the full command line, its RSS
        if info is None:
            continue
        shown.append(ProcMem(pid, "supervisor" if pid == supervisor_pid else info.role, info.rss_bytes))
    return HostSample(at=time.time(), cpu_count=psutil.cpu_count() or 1, load_1m=load, cpu_percent=cpu,
                      ram_total_bytes=vm.total, ram_used_bytes=vm.total - vm.available,
                      ram_available_bytes=vm.available, swap_total_bytes=sw.total, swap_used_bytes=sw.used,
                      procs=shown, procs_left_out=max(0, len(pids) - PROCS_MOST))


def summary(s: HostSample) -> dict[str, Any]:
    """The `host --json` object: the sample plus derived fractions."""
    d = s.to_dict()
    d["ram_used_fraction"] = round(s.ram_used_bytes / s.ram_total_bytes, 4) if s.ram_total_bytes else None
    d["swap_used_fraction"] = round(s.swap_used_bytes / s.swap_total_bytes, 4) if s.swap_total_bytes else None
    return d
