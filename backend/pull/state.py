"""The running pull's state file, `<state dir>/pull.json`, like the supervisor's `server.json`.

The pull process writes it (atomic, 0600, through backend.server.statefile.write) at each phase and about
twice a second while downloading: who it is (pid, its start time, command line), what it pulls, the
progress snapshot, whether it is detached (keeps going without a console) and, at the end, the
result. A console reads it to show a pull that a previous console (or `pull --detach`) started.
It believes a pull is running only when the file is ours (owner, mode), the pid is alive, started
at the recorded time, and its command line is a `pull`; only then does it signal it:
SIGTERM cancels (the .part files stay, a later pull continues), SIGUSR1 detaches it from its console.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from backend import paths
from backend.server import statefile

FINAL = ("done", "failed", "cancelled")


def state_path() -> Path:
    return paths.state_dir() / "pull.json"


class StateWriter:
    def __init__(self, repo_id: str, source: str, detached: bool, log_path: str | None = None,
                 every_s: float = 0.5, path: Path | None = None) -> None:
        self.path = path or state_path()
        self.every_s = every_s
        self._last = 0.0
        self.data: dict[str, Any] = {
            "pid": os.getpid(), "create_time": statefile.create_time(os.getpid()),
            "cmdline": statefile.cmdline(os.getpid()) or " ".join(sys.argv), "repo_id": repo_id,
            "source": source, "phase": "starting", "detached": detached, "log_path": log_path,
            "started_at": time.time(), "progress": None, "result": None}
        self._write()

    def event(self, phase: str, data: dict[str, Any]) -> None:
        if phase == "downloading":
            self.data["progress"] = data
            self.data["phase"] = phase
            if time.monotonic() - self._last < self.every_s:
                return
        elif phase == "preflight":
            self.data.update(phase=phase, local_dir=data.get("local_dir"), free_bytes=data.get("free_bytes"),
                             needed_bytes=data.get("needed_bytes"),
                             total_bytes=(data.get("listing") or {}).get("total_bytes"),
                             endpoint=(data.get("listing") or {}).get("endpoint"),
                             revision=(data.get("listing") or {}).get("revision"))
        else:
            self.data["phase"] = phase
            if "result" in data:
                self.data["result"] = data["result"]
        self._write()

    def set_detached(self, detached: bool = True) -> None:
        self.data["detached"] = detached
        self._write()

    def _write(self) -> None:
        self._last = time.monotonic()
        try:
            statefile.ensure_private_dirs()
            statefile.write_json(dict(self.data, updated_at=time.time()), self.path)
        except OSError:
            pass  # progress still goes to stderr; a full disk must not stop the pull here


def read(path: Path | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(data, None), (None, None) when there is no file, (None, why) when it is not to be trusted."""
    path = path or state_path()
    if not os.path.lexists(path):
        return None, None
    why = statefile.file_problem(path)
    if why:
        return None, f"untrusted pull state file {path}: {why}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"unreadable pull state file {path}: {e}"
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int) or isinstance(data.get("pid"), bool):
        return None, f"pull state file {path} has no pid"
    return data, None


def alive(data: dict[str, Any]) -> bool:
    """The pid in the file is that pull process (same start time, a `pull` command line)."""
    pid, born = data.get("pid"), data.get("create_time")
    if not isinstance(pid, int) or pid <= 1 or not isinstance(born, (int, float)):
        return False
    now_born = statefile.create_time(pid)
    if now_born is None or abs(now_born - born) > 1.0:
        return False
    line = statefile.cmdline(pid) or ""
    return " pull" in f" {line} " and ("qwen-tui" in line or "backend.cli" in line)


def running(path: Path | None = None) -> dict[str, Any] | None:
    data, _ = read(path)
    if data and data.get("phase") not in FINAL and alive(data):
        return data
    return None


def signal_pull(data: dict[str, Any], sig: int) -> bool:
    if not alive(data):
        return False
    try:
        os.kill(int(data["pid"]), sig)
    except OSError:
        return False
    return True


def cancel(data: dict[str, Any]) -> bool:
    return signal_pull(data, signal.SIGTERM)


def detach(data: dict[str, Any]) -> bool:
    return signal_pull(data, signal.SIGUSR1)


def spawn(argv: list[str]) -> tuple[int, Path]:
    """Start a pull's command line (backend/spawn.py writes it) in its own session; its output goes to a log."""
    statefile.ensure_private_dirs()
    log = statefile.logs_dir() / f"pull-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=dict(os.environ, QWEN_TUI_PULL_LOG=str(log)))
    return proc.pid, log
