"""Adopt, or tell the truth: after a supervisor dies (kill -9, the OOM killer) while its server
lives, prove that the server is this state dir's before a new supervisor takes it over.

The proof is facts, each checked on its own (any one failing refuses the adoption):
  - the pid and its start time are the ones our own (trusted) state file recorded;
  - its command line is the argv the supervisor launched;
  - our log (under this state dir's logs/) begins with the launch marker naming that pid;
  - it started after the dead supervisor did, and within seconds of the recorded launch;
  - it leads its own process group, and no other live qwen-tui supervisor runs it;
  - where its environment can be read, its QWEN_TUI_HOME / state dir is this one.
Without a proof the server is reported, never adopted: "orphaned: running without a supervisor
(pid, port)", with the fix.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend import paths
from backend.server import statefile
from backend.server.status import SUPERVISED, in_group

LAUNCH_SLACK_S = 10.0  # the recorded started_at is taken just before the spawn


@dataclass
class Proof:
    pid: int | None
    port: int | None
    facts: list[str] = field(default_factory=list)  # what was shown to hold
    failed: list[str] = field(default_factory=list)  # what could not be shown

    @property
    def ok(self) -> bool:
        return self.pid is not None and not self.failed

    def orphaned_text(self) -> str:
        return f"orphaned: running without a supervisor (pid {self.pid}, port {self.port})"

    def fix(self) -> str:
        if self.ok:
            return "`qwen-tui serve` (or s in the console) adopts it; `qwen-tui stop` stops it"
        return (f"not provably this state dir's ({'; '.join(self.failed)}): "
                f"`qwen-tui stop --orphans --pid {self.pid}` stops it, then start again")

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "port": self.port, "ok": self.ok, "facts": self.facts, "failed": self.failed}


def dead_supervisors_server(data: dict[str, Any] | None) -> int | None:
    """The API server pid a supervised state file names when its supervisor is gone and that pid
    still runs with the recorded start time; else None."""
    if not data or not in_group(data.get("state"), SUPERVISED):
        return None
    if statefile.pid_matches(data.get("supervisor_pid"), data.get("supervisor_create_time")) and \
            statefile.is_supervisor(data["supervisor_pid"]):
        return None
    pid = data.get("pid")
    return pid if pid and statefile.pid_matches(pid, data.get("pid_create_time")) else None


_MARKER_PID = re.compile(r"qwen-tui: launch at [^(]*\(unix [0-9.]+\) pid (\d+) ")


def _marker_pid(log_path: Any) -> int | None:
    """The pid the launch marker (backend/logparse/marker.py, our log's first line) names."""
    path = statefile.safe_log_path(log_path)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline(64 << 10).rstrip("\n")
    except OSError:
        return None
    m = _MARKER_PID.match(first)
    return int(m.group(1)) if m else None


def prove(data: dict[str, Any] | None) -> Proof | None:
    """None when no server of a dead supervisor runs; else the Proof, ok or not."""
    pid = dead_supervisors_server(data)
    if pid is None or data is None:
        return None
    import psutil  # only when a supervisor died: the console starts without it

    from backend.server import owners  # only when a supervisor died: the console starts without it

    proof = Proof(pid, data.get("port"))
    proof.facts.append(f"pid {pid} started at the recorded time ({data.get('pid_create_time')})")
    try:
        p = psutil.Process(pid)
        argv = p.cmdline()
    except psutil.Error as e:
        proof.failed.append(f"pid {pid} cannot be read: {type(e).__name__}")
        return proof
    if argv == data.get("argv"):
        proof.facts.append("its command line is the argv the supervisor launched")
    else:
        proof.failed.append("its command line is not the recorded argv")
    marked = _marker_pid(data.get("log_path"))
    if marked == pid:
        proof.facts.append(f"the log {data.get('log_path')} begins with its launch line (pid {pid})")
    else:
        proof.failed.append("our log's launch line names " + (f"pid {marked}" if marked else "no pid"))
    created = data.get("pid_create_time") or 0.0
    started = data.get("started_at")
    sup_created = data.get("supervisor_create_time") or 0.0
    if created >= sup_created and (started is None or abs(created - started) <= LAUNCH_SLACK_S):
        proof.facts.append("it started after its supervisor, at the recorded launch")
    else:
        proof.failed.append("its start time does not match the state file's")
    try:
        pgid = os.getpgid(pid)
    except OSError:
        pgid = None
    if pgid == pid and data.get("pgid") in (None, pid):
        proof.facts.append(f"it leads its own process group ({pid})")
    else:
        proof.failed.append(f"its process group is {pgid}, not its own")
    runner = owners.owner_of(pid, owners.live_supervisors())
    if runner is not None:
        proof.failed.append(f"it is run by {runner.describe()}")
    where = owners._state_dir(p)
    here = str(paths.state_dir())
    if where is not None and Path(where).resolve() != Path(here).resolve():
        proof.failed.append(f"its environment names another state dir ({where})")
    elif where is not None:
        proof.facts.append("its environment names this state dir")
    return proof


class Adopted:
    """An adopted server in the place of a child process: not our child, so its exit code cannot
    be known; ``returncode`` is None while the pid runs with its start time, then -1."""

    def __init__(self, pid: int, create_time: float) -> None:
        self.pid, self.create_time = pid, create_time
        self._gone = False

    @property
    def returncode(self) -> int | None:
        if not self._gone and not statefile.pid_matches(self.pid, self.create_time):
            self._gone = True
        return -1 if self._gone else None
