"""Who owns a process or a port: the qwen-tui supervisors alive on this machine, whoever started
them, under whatever state dir or user.

One server per port: before a start, a port already bound or another live supervisor on the same
port is shown with its owner (supervisor pid, user, state dir) and blocks the start. The orphan scan
never offers to kill what another live supervisor runs (it would only restart it): it offers to stop
that supervisor instead, and only when it is this user's.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import psutil

from backend.server import procs, statefile
from backend.server.ports import listening_pids, probe_bind
from backend.timefmt import duration as ago  # the name its readers use: an uptime in words


def shown_path(path: str | None, user: str | None = None) -> str | None:
    """`path` with its owner's home as `~` (this user's) or `~alice`: a state dir fits on one line."""
    if not path:
        return path
    me = pwd.getpwuid(os.getuid()).pw_name
    owner = user or me
    try:
        home = pwd.getpwnam(owner).pw_dir.rstrip("/")
    except KeyError:  # a user this box's passwd does not name (a container's uid)
        return path
    if not home or not (path == home or path.startswith(home + "/")):
        return path
    return ("~" if owner == me else "~" + owner) + path[len(home):]


@dataclass(frozen=True)
class SupervisorInfo:
    pid: int
    create_time: float
    uid: int | None
    user: str
    state_dir: str | None  # None: not visible from here (another user's environment)
    port: int | None  # from its state file, when readable
    state: str | None
    cmdline: str
    owned: tuple[int, ...] = field(default=())  # its descendants, its server's group, what it reaps
    started_at: float | None = None  # its server's launch, from its state file

    @property
    def ours(self) -> bool:
        """Started by this user (so this user may stop it)."""
        return self.uid == os.getuid()

    def describe(self) -> str:
        where = shown_path(self.state_dir, self.user) or "state dir not visible"
        port = f", port {self.port}" if self.port else ""
        state = f", {self.state}" if self.state else ""
        return f"qwen-tui supervisor pid {self.pid} (user {self.user}, {where}{port}{state})"

    def stop_hint(self) -> str:
        if not self.ours:
            return f"ask {self.user} to stop it"
        home = Path(self.state_dir).parent if self.state_dir and self.state_dir.endswith("/state") else None
        return (f"QWEN_TUI_HOME={home} qwen-tui stop" if home else "qwen-tui stop") + \
            f" (or kill -TERM {self.pid})"

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "user": self.user, "state_dir": self.state_dir, "port": self.port,
                "state": self.state, "cmdline": self.cmdline, "owned": list(self.owned)}


def _user(uid: int | None) -> str:
    if uid is None:
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _state_dir(p: psutil.Process) -> str | None:
    try:
        env = p.environ()
    except (psutil.Error, OSError):
        env = None
    if env:
        if env.get("QWEN_TUI_HOME"):
            return str(Path(env["QWEN_TUI_HOME"]) / "state")
        if env.get("XDG_STATE_HOME"):
            return str(Path(env["XDG_STATE_HOME"]) / "qwen-tui")
        if env.get("HOME"):
            return str(Path(env["HOME"]) / ".local" / "state" / "qwen-tui")
    try:
        for f in p.open_files():
            if "/logs/vllm-" in f.path:
                return str(Path(f.path).parent.parent)
    except (psutil.Error, OSError):
        pass
    return None


def _its_state(state_dir: str | None) -> dict[str, Any]:
    """Its state file, read for display and ownership only (types checked, never signalled)."""
    if not state_dir:
        return {}
    try:
        data = json.loads((Path(state_dir) / "server.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if statefile.type_problem(data) is None else {}


def _owned_by(pid: int, data: dict[str, Any]) -> set[int]:
    owned = {pid, *procs.descendants(pid)}
    if data.get("supervisor_pid") == pid:
        spid, pgid = data.get("pid"), data.get("pgid")
        if spid and pgid == spid and pgid != os.getpgrp():
            owned.update(procs.group_members(pgid))
        owned.update(p for p in data.get("reaping_pids") or [] if statefile.create_time(p) is not None)
    return owned


def live_supervisors(exclude: Iterable[int] = ()) -> list[SupervisorInfo]:
    """Every qwen-tui supervisor running on this machine (any user, any state dir), by command
    line; never this process or its ancestors, nor the pids in ``exclude``."""
    skip = procs._self_and_ancestors() | set(exclude)
    out = []
    for p in psutil.process_iter(["cmdline", "uids", "create_time", "status"]):
        if p.pid in skip or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        argv = p.info["cmdline"] or []
        if not statefile.is_supervisor_argv(argv):
            continue
        uid = p.info["uids"].real if p.info["uids"] else None
        state_dir = _state_dir(p)
        data = _its_state(state_dir)
        port = data.get("port") if data.get("supervisor_pid") == p.pid else None
        mine = data.get("supervisor_pid") == p.pid
        out.append(SupervisorInfo(p.pid, p.info["create_time"] or 0.0, uid, _user(uid), state_dir, port,
                                  data.get("state") if mine else None,
                                  " ".join(argv)[:200], tuple(sorted(_owned_by(p.pid, data))),
                                  data.get("started_at") if mine else None))
    return sorted(out, key=lambda s: s.pid)


GIB = 2**30


@dataclass(frozen=True)
class TeamServer:
    """A server another live qwen-tui supervisor runs (another state dir or user): a teammate's,
    not an orphan. Listed with what it holds; never offered to kill (its supervisor would restart it)."""

    sup: SupervisorInfo
    pids: tuple[int, ...]  # its live processes, the supervisor left out
    gpu_bytes: dict[int, int]  # GPU index -> bytes its processes hold (NVML); {} without NVML
    rss_bytes: int  # resident memory of its processes (what it holds on the CPU build)
    uptime_s: float | None

    @property
    def user(self) -> str:
        return self.sup.user

    @property
    def port(self) -> int | None:
        return self.sup.port

    @property
    def gpu_total(self) -> int:
        return sum(self.gpu_bytes.values())

    def memory_text(self) -> str:
        if self.gpu_bytes:
            return " + ".join(f"GPU{i} {b / GIB:.1f} GiB" for i, b in sorted(self.gpu_bytes.items()))
        return f"RAM {self.rss_bytes / GIB:.1f} GiB" if self.rss_bytes else "no memory held"

    def title(self) -> str:
        """"alice's server on port 8001": how a teammate's server is named everywhere."""
        port = f"port {self.sup.port}" if self.sup.port else "a port not visible from here"
        return f"{self.sup.user}'s server on {port}"

    def describe(self) -> str:
        facts = [self.sup.state or "state not visible",
                 shown_path(self.sup.state_dir, self.sup.user) or "state dir not visible",
                 f"supervisor pid {self.sup.pid}", f"up {ago(self.uptime_s)}"]
        return f"{self.title()} ({', '.join(facts)}): holds {self.memory_text()}"

    def to_dict(self) -> dict[str, Any]:
        return {**self.sup.to_dict(), "pids": list(self.pids), "uptime_s": self.uptime_s,
                "gpu_bytes": {str(k): v for k, v in self.gpu_bytes.items()}, "rss_bytes": self.rss_bytes,
                "summary": self.describe()}


def team_servers(supervisors: Iterable[SupervisorInfo], monitor: Any = None,
                 now: float | None = None) -> list[TeamServer]:
    """What each of these (other) supervisors' servers holds: GPU memory per GPU where NVML lists
    its pids, the resident memory of its processes, how long it has been up."""
    by_gpu = monitor.processes_by_gpu() if monitor is not None and monitor.available() else {}
    now = time.time() if now is None else now
    out = []
    for s in supervisors:
        pids, rss = [], 0
        for pid in s.owned:
            if pid == s.pid:
                continue
            try:
                p = psutil.Process(pid)
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                rss += p.memory_info().rss
            except psutil.Error:
                continue
            pids.append(pid)
        gpu = {i: sum(b or 0 for pid, b in held.items() if pid in s.owned) for i, held in by_gpu.items()}
        started = s.started_at or s.create_time or None
        out.append(TeamServer(s, tuple(sorted(pids)), {i: b for i, b in gpu.items() if b}, rss,
                              round(now - started, 1) if started else None))
    return out


def owner_of(pid: int, supervisors: Iterable[SupervisorInfo]) -> SupervisorInfo | None:
    return next((s for s in supervisors if pid in s.owned), None)


def port_holders(port: int) -> list[tuple[int, str]]:
    return listening_pids(port)


def start_blockers(host: str, port: int, supervisors: list[SupervisorInfo] | None = None,
                   bind: Any = None, holders: Any = None) -> list[str]:
    """Why a server may not start on ``host:port`` now: another live supervisor on that port (even
    while its server is down, in backoff), or a process already listening there; each with its owner."""
    sups = live_supervisors() if supervisors is None else supervisors
    out = []
    for s in sups:  # one whose port cannot be read (another user's) is caught by the bind below
        if s.port == port:
            out.append(f"another {s.describe()} serves port {port}; stop it first: {s.stop_hint()}")
    err = (bind or probe_bind)(host, port)
    if err is not None and getattr(err, "errno", None) == errno.EADDRINUSE:
        found = (holders or port_holders)(port)
        who = []
        for pid, name in found:
            sup = owner_of(pid, sups)
            who.append(f"pid {pid} {name}" + (f", run by {sup.describe()}" if sup else ""))
        out.append(f"port {port} is already in use" + (f" by {'; '.join(who)}" if who else
                                                        " (by a process of another user)")
                   + f": pick another with --set server.port={port + 1}, or stop it")
    return out


def _zombie(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return True


def stop_supervisor(info: SupervisorInfo, timeout: float = 60.0) -> str:
    """SIGTERM one supervisor (it stops its own server, verified), then wait for it to exit.
    Refused for another user's supervisor, or a pid that is no longer that supervisor."""
    if not info.ours:
        raise ValueError(f"supervisor pid {info.pid} belongs to {info.user}: not stopped")
    if not (statefile.pid_matches(info.pid, info.create_time) and statefile.is_supervisor(info.pid)):
        raise ValueError(f"pid {info.pid} is no longer that supervisor: not signalled")
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not statefile.pid_matches(info.pid, info.create_time) or _zombie(info.pid):
            return f"supervisor pid {info.pid} stopped its server and exited"
        time.sleep(0.1)
    return f"supervisor pid {info.pid} got SIGTERM but has not exited after {timeout:.0f} s"
