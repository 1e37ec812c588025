"""vLLM processes: find them, attach GPU memory, stop them and prove they are gone.

vLLM's tree for TP=2 is ``vllm serve`` (API server) -> ``VLLM::EngineCore`` -> ``VLLM::Worker_TP0/1``,
all in the API server's process group (tech brief §3, §8). When the API server is SIGKILLed the
engine and workers survive, re-parented, still holding the GPUs; they keep their process group.

Nothing here kills by name: only the pids and process group a caller passes, plus the descendants
of those pids found before the first signal. Each pid's start time is recorded when it is first
seen, so a pid the kernel has reused for another program is never signalled and never counted.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

import psutil

TITLE_PREFIX = "VLLM::"
CMDLINE_MAX = 200
_ATTRS = ["pid", "ppid", "name", "cmdline", "memory_info", "create_time", "uids"]


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int | None
    pgid: int | None
    name: str  # psutil's name(): the kernel's comm, which is cut to 15 characters
    cmdline: str  # at most ~200 characters; vLLM's setproctitle shows here as "VLLM::EngineCore"
    rss_bytes: int | None
    create_time: float | None
    gpu_bytes: int | None = None
    # "api_server", "engine_core", "worker", "vllm" (another VLLM:: title) or "other";
    # decided from the full command line, before it is cut short
    role: str = "other"
    uid: int | None = None  # its real user id (another user's process is never offered to kill)


@dataclass(frozen=True)
class StopReport:
    seconds: float
    terminated: list[int]  # exited after SIGTERM
    killed: list[int]  # needed SIGKILL, then exited
    survivors: list[int]  # still alive after SIGKILL: should be empty
    errors: list[str] = field(default_factory=list)  # e.g. "1234: no permission to signal"

    @property
    def ok(self) -> bool:
        return not self.survivors

    def summary(self) -> str:
        if self.survivors:
            n = len(self.survivors)
            pids = ", ".join(map(str, self.survivors))
            return f"{n} process{'es' if n != 1 else ''} survive{'s' if n == 1 else ''} SIGKILL: {pids}"
        if not self.terminated and not self.killed:
            return "nothing was running"
        text = f"stopped in {self.seconds:.1f} s"
        if self.killed:
            n = len(self.killed)
            text += f"; {n} process{'es' if n != 1 else ''} needed SIGKILL"
        return text


# ------------------------------------------------------------------ finding


def _is_api_server(argv: list[str]) -> bool:
    for i, arg in enumerate(argv):
        if arg.startswith("vllm.entrypoints"):
            return True
        if os.path.basename(arg) == "vllm" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return True
    return False


def _is_vllm(name: str, argv: list[str]) -> bool:
    if name.startswith(TITLE_PREFIX) or (argv and argv[0].startswith(TITLE_PREFIX)):
        return True
    # setproctitle may leave the title as one argv string with spaces: split before matching
    return _is_api_server(" ".join(argv).split())


def _role(name: str, argv: list[str]) -> str:
    title = argv[0] if argv and argv[0].startswith(TITLE_PREFIX) else name
    if title.startswith(TITLE_PREFIX + "EngineCor"):
        return "engine_core"
    if title.startswith(TITLE_PREFIX + "Worker"):
        return "worker"
    if title.startswith(TITLE_PREFIX):
        return "vllm"
    return "api_server" if _is_api_server(" ".join(argv).split()) else "other"


def _self_and_ancestors() -> set[int]:
    me = psutil.Process()
    pids = {me.pid}
    try:
        pids.update(p.pid for p in me.parents())
    except psutil.Error:
        pass
    return pids


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _cmd(argv: list[str] | None) -> str:
    text = " ".join(argv or [])
    return text if len(text) <= CMDLINE_MAX else text[: CMDLINE_MAX - 1] + "…"


def _info(d: dict[str, Any]) -> ProcInfo:
    mem = d.get("memory_info")
    argv = d.get("cmdline") or []
    return ProcInfo(
        pid=d["pid"],
        ppid=d.get("ppid"),
        pgid=_pgid(d["pid"]),
        name=d.get("name") or "",
        cmdline=_cmd(argv),
        rss_bytes=mem.rss if mem is not None else None,
        create_time=d.get("create_time"),
        role=_role(d.get("name") or "", argv),
        uid=d["uids"].real if d.get("uids") is not None else None,
    )


def find_vllm_processes(exclude_pids: Iterable[int] = frozenset()) -> list[ProcInfo]:
    """vLLM processes on this machine, by title (``VLLM::*``, in name or cmdline) or command line
    (``vllm serve``, ``vllm.entrypoints``). Never this process or its ancestors. Sorted by pid."""
    skip = _self_and_ancestors() | set(exclude_pids)
    found = []
    for p in psutil.process_iter(["name", "cmdline", "status"]):  # the rest only for matches: ~2x cheaper
        if p.pid in skip or not _is_vllm(p.info["name"] or "", p.info["cmdline"] or []):
            continue
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue  # exited, holds no memory; its parent has not reaped it yet
        try:
            with p.oneshot():
                found.append(_info(p.as_dict(_ATTRS)))
        except psutil.NoSuchProcess:
            pass
    return sorted(found, key=lambda i: i.pid)


def process_info(pid: int) -> ProcInfo | None:
    """ProcInfo for one pid, or None when it is gone."""
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            return _info(p.as_dict(_ATTRS))
    except psutil.NoSuchProcess:
        return None


def with_gpu_memory(procs: Iterable[ProcInfo], gpu_processes: dict[int, int | None]) -> list[ProcInfo]:
    """Fill ``gpu_bytes`` from NVML's pid -> bytes (``GpuMonitor.processes()``); NVML pids not in
    ``procs`` are appended (named from psutil when visible: in a container NVML gives host pids)."""
    out = []
    seen = set()
    for info in procs:
        seen.add(info.pid)
        out.append(replace(info, gpu_bytes=gpu_processes.get(info.pid, info.gpu_bytes)))
    for pid in sorted(set(gpu_processes) - seen):
        info = process_info(pid) or ProcInfo(pid, None, None, "?", "(not visible from here)", None, None)
        out.append(replace(info, gpu_bytes=gpu_processes[pid]))
    return out


_WORKER_RANK = re.compile(r"Worker_(?:PP(\d+)_)?TP(\d+)")


def worker_rank(title: str, tp_size: int | None = None) -> int | None:
    """The rank in vLLM's worker title: "VLLM::Worker_TP1" -> 1, "VLLM::Worker_PP1_TP0" -> 1 * tp_size + 0;
    None when the title carries none (a worker that has not been given its rank yet)."""
    m = _WORKER_RANK.search(title)
    if not m:
        return None
    tp = int(m.group(2))
    if m.group(1) is None:
        return tp
    return int(m.group(1)) * tp_size + tp if tp_size else None


def workers(pgid: int, tp_size: int | None = None) -> list[dict[str, Any]]:
    """The live VLLM::Worker* processes of a server's process group, by rank then pid:
    {pid, rank, title, rss_bytes} (rank None until vLLM names the worker's rank in its title)."""
    out = []
    for pid in group_members(pgid):
        info = process_info(pid)
        if info is None or info.role != "worker":
            continue
        title = info.cmdline.split()[0] if info.cmdline.startswith(TITLE_PREFIX) else info.name
        out.append({"pid": pid, "rank": worker_rank(title, tp_size), "title": title, "rss_bytes": info.rss_bytes})
    return sorted(out, key=lambda w: (w["rank"] is None, w["rank"] or 0, w["pid"]))


def descendants(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def group_members(pgid: int, include_zombies: bool = False) -> list[int]:
    """Pids whose process group is ``pgid`` (zombies left out unless asked for)."""
    members = []
    for pid in psutil.pids():
        if _pgid(pid) != pgid:
            continue
        if not include_zombies and _status(pid) in (None, psutil.STATUS_ZOMBIE):
            continue
        members.append(pid)
    return members


def _status(pid: int) -> str | None:
    try:
        return str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return None


def _create_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return None


def is_same_process(pid: int, create_time: float, cmd_substr: str | None = None) -> bool:
    """True only if ``pid`` is alive with this exact start time (±0.01 s) and, when given, its
    command line contains ``cmd_substr``. Rejects state files whose pid was reused."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > 0.01 or p.status() == psutil.STATUS_ZOMBIE:
            return False
        return cmd_substr is None or cmd_substr in " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


# ------------------------------------------------------------------ stopping


def _check_targets(pgid: int | None, pids: Iterable[int]) -> None:
    protected = _self_and_ancestors()
    if pgid is not None:
        if pgid <= 1:
            raise ValueError(f"refusing to signal process group {pgid}")
        if pgid == os.getpgrp():
            raise ValueError(f"process group {pgid} is our own: start vLLM with start_new_session=True")
    for pid in pids:
        if pid <= 1:
            raise ValueError(f"refusing to signal pid {pid}")
        if pid in protected:
            raise ValueError(f"pid {pid} is this process or one of its ancestors")


class _Targets:
    """Pids to stop, each pinned to its start time so reused pids are ignored."""

    def __init__(self, pgid: int | None, popen: Any) -> None:
        self.pgid = pgid
        self.popen = popen
        self.ctime: dict[int, float] = {}
        self.errors: list[str] = []

    def add(self, pid: int) -> None:
        if pid not in self.ctime:
            ctime = _create_time(pid)
            if ctime is not None:
                self.ctime[pid] = ctime

    def add_group(self) -> None:
        if self.pgid is not None:
            for pid in group_members(self.pgid):
                self.add(pid)

    def alive(self, pid: int) -> bool:
        if self.popen is not None and pid == self.popen.pid and self.popen.poll() is not None:
            return False  # reaped by its owner's Popen, keeping the return code
        try:
            p = psutil.Process(pid)
            return bool(abs(p.create_time() - self.ctime[pid]) <= 0.01 and p.status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    def living(self) -> list[int]:
        self.add_group()  # the group may have gained members (vLLM starting workers)
        return sorted(pid for pid in self.ctime if self.alive(pid))

    def signal(self, pids: Iterable[int], sig: int, group: bool) -> None:
        if group and self.pgid is not None and group_members(self.pgid):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                pass
            except PermissionError:
                self.errors.append(f"group {self.pgid}: no permission to signal")
        for pid in pids:
            if not self.alive(pid):
                continue
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            except PermissionError:
                self.errors.append(f"{pid}: no permission to signal")

    def wait(self, deadline: float, poll: float, reap: bool) -> list[int]:
        while True:
            if reap:
                self._reap()
            left = self.living()
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))

    def _reap(self) -> None:
        for pid in self.ctime:
            if self.popen is not None and pid == self.popen.pid:
                continue
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass  # not our child


def terminate(
    pgid: int | None,
    pids: Iterable[int],
    timeout: float,
    poll: float = 0.1,
    *,
    popen: Any = None,
    kill_timeout: float = 5.0,
    reap: bool = False,
) -> StopReport:
    """SIGTERM the process group and each pid, wait up to ``timeout`` s for them and their
    descendants (collected before signalling) to exit, SIGKILL what is left (group and pids),
    wait up to ``kill_timeout`` s, and report.

    Zombies count as gone. ``popen`` (a ``subprocess.Popen`` the caller owns) is polled, so its
    return code is kept. ``reap=True`` also reaps any target that is our own child with
    ``os.waitpid(WNOHANG)``; leave it off when a Popen or an asyncio child watcher owns them.
    Raises ValueError for pgid/pid <= 1, our own group, this process or its ancestors.
    """
    pids = list(pids)
    if popen is not None and popen.pid not in pids:
        pids.append(popen.pid)
    _check_targets(pgid, pids)
    start = time.monotonic()
    t = _Targets(pgid, popen)
    for pid in pids:
        t.add(pid)
        for child in descendants(pid):
            t.add(child)
    t.add_group()
    at_start = set(t.living())
    t.signal([p for p in pids if p in t.ctime], signal.SIGTERM, group=True)
    left = t.wait(start + timeout, poll, reap)
    terminated = sorted(at_start - set(left))
    killed: list[int] = []
    survivors: list[int] = []
    if left:
        t.signal(left, signal.SIGKILL, group=True)
        survivors = t.wait(time.monotonic() + kill_timeout, poll, reap)
        killed = sorted(set(left) - set(survivors))
    if popen is not None and not survivors:
        try:
            popen.wait(timeout=1.0)
        except Exception:  # noqa: BLE001 - the pid is gone or a zombie; the owner will see it
            pass
    return StopReport(
        seconds=time.monotonic() - start,
        terminated=terminated,
        killed=killed,
        survivors=survivors,
        errors=t.errors,
    )
