"""Processes that hold (or may hold) the GPUs without belonging to the supervised server.

Before every start the console and ``qwen-tui serve`` look for vLLM processes no supervisor owns
(``VLLM::EngineCore``, ``VLLM::Worker*``, ``vllm serve``, ``vllm.entrypoints``) and for NVML compute
processes on the configured GPUs. The user sees pid, role, command and memory, and may kill
exactly the pids they pick: nothing is ever killed by name pattern, and a pid that was not in the
scan (or that has since been reused by another program) is refused.

After a stop, ``wait_released`` checks with NVML that the GPU memory the stopped pids held is gone.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from backend.server import owners, procs, statefile
from backend.server.owners import SupervisorInfo, TeamServer
from backend.server.procs import ProcInfo, StopReport

GIB = 2**30


@dataclass(frozen=True)
class OrphanScan:
    processes: list[ProcInfo]
    gpu_indices: list[int] | None  # the GPUs looked at (None: all, or NVML not available)
    nvml: str | None  # why NVML was not used, or None when it was
    # other qwen-tui supervisors alive on this machine (another state dir or user)
    supervisors: list[SupervisorInfo] = field(default_factory=list)
    # their servers, with what each holds: teammates' servers, not orphans (owners.TeamServer)
    servers: list[TeamServer] = field(default_factory=list)

    @property
    def orphans(self) -> list[ProcInfo]:
        """The processes no live qwen-tui supervisor runs: the only ones called orphans."""
        return [p for p in self.processes if self.owner(p.pid) is None]

    @property
    def pids(self) -> list[int]:
        """The pids that may be killed: not another user's, not run by another live supervisor."""
        return [p.pid for p in self.processes if self.refusal(p.pid) is None]

    @property
    def gpu_bytes(self) -> int:
        return sum(p.gpu_bytes or 0 for p in self.processes)

    def find(self, pid: int) -> ProcInfo | None:
        return next((p for p in self.processes if p.pid == pid), None)

    def owner(self, pid: int) -> SupervisorInfo | None:
        """The live supervisor that runs ``pid`` (killing it would only make that one restart it)."""
        return owners.owner_of(pid, self.supervisors)

    def refusal(self, pid: int) -> str | None:
        """Why ``pid`` is not offered for a kill, or None."""
        sup = self.owner(pid)
        if sup is not None:
            return (f"pid {pid} is run by {sup.describe()}: killing it would only restart it; "
                    f"stop that supervisor instead ({sup.stop_hint()})")
        info = self.find(pid)
        if info is not None and info.uid is not None and info.uid != os.getuid():
            return f"pid {pid} belongs to another user ({owners._user(info.uid)}): not killed"
        return None

    def describe(self) -> str:
        """The orphans, then (not orphans) the other supervisors' servers with their processes."""
        lines = []
        for p in self.orphans:
            mine = p.uid is None or p.uid == os.getuid()
            lines.append("  " + describe(p) + ("" if mine else f"  [user {owners._user(p.uid)}]"))
        servers = self.servers or [TeamServer(s, (), {}, 0, None) for s in self.supervisors]
        if servers:
            lines.append("  not orphans, run by another live qwen-tui supervisor (never killed from here):")
        for t in servers:
            lines.append(f"    {t.describe()}")
            lines += [f"      {describe(p)}" for p in self.processes if self.owner(p.pid) is t.sup]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"processes": [dict(asdict(p), refusal=self.refusal(p.pid)) for p in self.processes],
                "gpu_indices": self.gpu_indices, "gpu_bytes": self.gpu_bytes, "nvml": self.nvml,
                "supervisors": [s.to_dict() for s in self.supervisors],
                "orphans": [p.pid for p in self.orphans], "servers": [t.to_dict() for t in self.servers]}


def describe(p: ProcInfo) -> str:
    mem = f", GPU {p.gpu_bytes / GIB:.1f} GiB" if p.gpu_bytes else ""
    rss = f", RSS {p.rss_bytes / GIB:.1f} GiB" if p.rss_bytes else ""
    return f"pid {p.pid} {p.role}: {p.cmdline[:80] or p.name}{mem}{rss}"


def configured_gpus(server_env: dict[str, Any] | None = None) -> list[int] | None:
    """NVML indices the server will use: CUDA_VISIBLE_DEVICES from ``[server] env`` or this
    process's environment when it lists plain integers; None (= all GPUs) otherwise."""
    value = (server_env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if value is None:
        return None
    items = [v.strip() for v in str(value).split(",") if v.strip()]
    if not all(v.isdigit() for v in items):
        return None  # UUIDs or MIG names: look at every GPU rather than guess
    return [int(v) for v in items]


def _own_supervisor() -> dict[str, Any] | None:
    data, _ = statefile.read_live(cleanup=False)
    return data


def _owned_pids(data: dict[str, Any] | None = None) -> set[int]:
    """The supervised server's processes and its supervisor: only when that supervisor is alive
    and trusted (statefile.read_live), and then only its descendants, its server's process group
    (the group the API server leads), and the pids it says it is still reaping."""
    data = data if data is not None else _own_supervisor()
    if not data:
        return _adoptable()
    from backend.server.owners import _owned_by  # only on this path: the console imports orphans at start-up

    return {p for p in _owned_by(data["supervisor_pid"], data) if p > 1}


def _adoptable() -> set[int]:
    """A dead supervisor's server that backend.server.adopt proves this state dir's: ours, waiting for a
    new supervisor to adopt it (a start does), never an orphan."""
    from backend.server import adopt  # only on this path: the console imports orphans at start-up

    last = statefile.read()
    proof = adopt.prove(last)
    return set(statefile.leftovers(last)) if proof is not None and proof.ok else set()


def scan(server_env: dict[str, Any] | None = None, monitor: Any = None,
         exclude_pids: Iterable[int] = ()) -> OrphanScan:
    """vLLM processes and GPU compute processes that the live supervisor does not own, and the
    other live qwen-tui supervisors (whose processes are listed but never offered to kill).

    ``monitor`` is a ``backend.gpu.GpuMonitor`` (one is opened and closed here when None)."""
    data = _own_supervisor()
    owned = _owned_pids(data) | set(exclude_pids)
    others = owners.live_supervisors(exclude=[data["supervisor_pid"]] if data else [])
    found = procs.find_vllm_processes(exclude_pids=owned)
    indices = configured_gpus(server_env)
    own_monitor = monitor is None
    if own_monitor:
        from backend.gpu import GpuMonitor  # NVML bindings only when a monitor is made here

        monitor = GpuMonitor()
    try:
        servers = owners.team_servers(others, monitor)
        if not monitor.available():
            return OrphanScan(found, None, monitor.reason or "NVML not available", others, servers)
        on_ours = {pid: used for pid, used in monitor.processes(indices).items() if pid not in owned}
        return OrphanScan(procs.with_gpu_memory(found, on_ours), indices, None, others, servers)
    finally:
        if own_monitor:
            monitor.shutdown()


def kill(pids: Iterable[int], found: OrphanScan, timeout: float = 5.0, monitor: Any = None) -> Stopped:
    """Stop exactly ``pids`` (and their descendants). Each must be in ``found`` and still be the
    same process (same start time); anything else raises ValueError before a signal is sent."""
    pids = list(dict.fromkeys(pids))
    for pid in pids:
        info = found.find(pid)
        if info is None:
            raise ValueError(f"pid {pid} is not one of the processes found: refusing to kill it")
        refusal = found.refusal(pid)
        if refusal:
            raise ValueError(refusal)
        if info.create_time is not None and not procs.is_same_process(pid, info.create_time):
            raise ValueError(f"pid {pid} has exited or now belongs to another program: not killed")
    done = stop_verified(None, pids, timeout, monitor)
    from backend.events import record_event  # only when something is killed

    for pid in pids:
        info = found.find(pid)
        record_event("kill", done.summary(), kill_pid=pid, role=info.role if info else None,
                     cmdline=info.cmdline[:120] if info else None)
    return done


@dataclass
class Stopped:
    stop: StopReport
    release: ReleaseReport

    @property
    def ok(self) -> bool:
        return self.stop.ok and self.release.ok

    def summary(self) -> str:
        if not self.release.checked and self.release.reason is None:
            return self.stop.summary()  # no GPU monitor was asked for (a CPU server)
        return f"{self.stop.summary()}; {self.release.summary()}"


def stop_verified(pgid: int | None, pids: Iterable[int], timeout: float, monitor: Any = None,
                  release_timeout: float = 10.0, **terminate_kw: Any) -> Stopped:
    """``procs.terminate`` then ``wait_released``: SIGTERM, SIGKILL after ``timeout``, no process
    left, and (where NVML works) no GPU memory left with any of them."""
    pids = list(pids)
    everyone = set(pids)
    for pid in pids:
        everyone.update(procs.descendants(pid))
    if pgid is not None:
        everyone.update(procs.group_members(pgid))
    held = gpu_holders(monitor, everyone)
    used_before = gpu_used(monitor)
    report = procs.terminate(pgid, pids, timeout, **terminate_kw)
    release = wait_released(monitor, held, timeout=release_timeout, used_before=used_before)
    return Stopped(report, release)


# ------------------------------------------------------------------ who holds each GPU


@dataclass(frozen=True)
class Holder:
    pid: int
    label: str  # "VLLM::Worker_TP0", "python", ... or "pid not visible" (another pid namespace)
    gpu_bytes: int | None
    owned: bool  # part of the supervised server


def holders_by_gpu(monitor: Any) -> dict[int, list[Holder]]:
    """GPU index -> the compute processes on it, largest first, each marked as the supervised
    server's own or not (an orphan, or another program)."""
    if monitor is None or not monitor.available():
        return {}
    data = _own_supervisor()
    owned = _owned_pids(data)
    by_gpu = monitor.processes_by_gpu()
    others: list[SupervisorInfo] = []
    if any(pid not in owned for held in by_gpu.values() for pid in held):  # name a teammate's server
        others = owners.live_supervisors(exclude=[data["supervisor_pid"]] if data else [])
    out: dict[int, list[Holder]] = {}
    for index, held in by_gpu.items():
        rows = []
        for pid, used in held.items():
            info = procs.process_info(pid)
            sup = None if pid in owned else owners.owner_of(pid, others)
            if sup is not None:
                label = f"{sup.user}'s server :{sup.port or '?'}"
            elif info is None:
                label = "pid not visible"
            elif info.cmdline.startswith(procs.TITLE_PREFIX):
                label = info.cmdline.split()[0]
            else:
                label = info.name or "?"
            rows.append(Holder(pid, label, used, pid in owned))
        out[index] = sorted(rows, key=lambda h: -(h.gpu_bytes or 0))
    return out


# ------------------------------------------------------------------ GPU memory release


@dataclass
class ReleaseReport:
    checked: bool  # False: NVML not available (reason says why)
    held_before: dict[int, int | None] = field(default_factory=dict)  # pid -> bytes before the stop
    still_held: dict[int, int | None] = field(default_factory=dict)  # pid -> bytes after waiting
    seconds: float = 0.0
    reason: str | None = None
    # memory used on the monitored GPUs, summed, before the stop and after the wait: the only
    # evidence inside a container, where NVML lists host pids that match nothing here
    used_before: int | None = None
    used_after: int | None = None

    @property
    def ok(self) -> bool:
        return not self.still_held

    def summary(self) -> str:
        if not self.checked:
            return f"GPU memory not checked ({self.reason or 'no NVML'})"
        used = ""
        if self.used_before is not None and self.used_after is not None:
            used = f" (GPUs: {self.used_before / GIB:.1f} -> {self.used_after / GIB:.1f} GiB used)"
        if self.still_held:
            pids = ", ".join(f"pid {p}" + (f" {b / GIB:.1f} GiB" if b else "")
                             for p, b in sorted(self.still_held.items()))
            return f"GPU memory NOT released after {self.seconds:.1f} s: {pids}{used}"
        if not self.held_before:
            return "no GPU memory was held by these processes" + used
        total = sum(b or 0 for b in self.held_before.values())
        n = len(self.held_before)
        return (f"GPU memory released: {total / GIB:.1f} GiB of {n} process{'es' if n != 1 else ''}"
                f" in {self.seconds:.1f} s{used}")

    def to_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "ok": self.ok, "seconds": round(self.seconds, 2),
                "held_before": {str(k): v for k, v in self.held_before.items()},
                "still_held": {str(k): v for k, v in self.still_held.items()},
                "used_before": self.used_before, "used_after": self.used_after,
                "reason": self.reason, "summary": self.summary()}


def gpu_used(monitor: Any) -> int | None:
    """Memory used on the monitored GPUs, summed (None when NVML gives no figure)."""
    if monitor is None or not monitor.available():
        return None
    values = [s.memory_used_bytes for s in monitor.sample()]
    return None if not values or any(v is None for v in values) else sum(values)


def gpu_holders(monitor: Any, pids: Iterable[int]) -> dict[int, int | None]:
    """pid -> GPU bytes for those of ``pids`` that NVML lists as compute processes."""
    if monitor is None or not monitor.available():
        return {}
    held = monitor.processes()
    return {pid: held[pid] for pid in pids if pid in held}


def wait_released(monitor: Any, held_before: dict[int, int | None], timeout: float = 10.0,
                  poll: float = 0.2, used_before: int | None = None) -> ReleaseReport:
    """Wait until NVML no longer lists any pid of ``held_before``; report what it saw.
    ``used_before``: ``gpu_used(monitor)`` taken before the stop, to report before -> after."""
    if monitor is None:
        return ReleaseReport(False, dict(held_before))
    if not monitor.available():
        return ReleaseReport(False, dict(held_before), reason=monitor.reason or "NVML not available")
    start = time.monotonic()
    still: dict[int, int | None] = {}
    while True:
        now_held = monitor.processes()
        still = {pid: now_held[pid] for pid in held_before if pid in now_held}
        if not still or time.monotonic() - start >= timeout:
            break
        time.sleep(poll)
    return ReleaseReport(True, dict(held_before), still, time.monotonic() - start,
                         used_before=used_before, used_after=gpu_used(monitor))
