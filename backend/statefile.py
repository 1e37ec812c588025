"""The supervisor's state file: what a console needs to find and trust a running server.

Written atomically (temp file + rename) by the supervisor process only. Readers never trust it
blindly: `read_live()` checks that the supervisor pid is alive with the recorded start time, so a
stale file (dead pid, or a pid reused by another program) is recognised and removed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psutil

from backend import paths

STATES = ("stopped", "starting", "ready", "failed", "stopping", "backoff", "sleeping")


def state_path() -> Path:
    return paths.state_dir() / "server.json"


def logs_dir() -> Path:
    return paths.state_dir() / "logs"


def write(data: dict[str, Any], path: Path | None = None) -> None:
    path = path or state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dict(data, updated_at=time.time())
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read(path: Path | None = None) -> dict[str, Any] | None:
    path = path or state_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError):
        return None


def cmdline(pid: int) -> str | None:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except (psutil.Error, ValueError):
        return None


def pid_matches(pid: Any, created: Any) -> bool:
    """True only if `pid` runs now and started at `created` (a reused pid starts later)."""
    if not isinstance(pid, int) or pid <= 0 or not isinstance(created, (int, float)):
        return False
    actual = create_time(pid)
    return actual is not None and abs(actual - created) < 0.05


def read_live(path: Path | None = None, cleanup: bool = True) -> tuple[dict[str, Any] | None, str | None]:
    """The state of a live supervisor, or (None, why) when there is none or the file is stale.

    A stale file is renamed to `server.json.stale` (kept for the record, never trusted).
    """
    path = path or state_path()
    data = read(path)
    if data is None:
        return None, None if not path.exists() else f"{path} is unreadable"
    pid = data.get("supervisor_pid")
    recorded = data.get("supervisor_cmdline")  # same pid and start time but another program: exec()
    if pid_matches(pid, data.get("supervisor_create_time")) and (recorded is None or cmdline(pid) == recorded):
        return data, None
    if data.get("state") in ("stopped", "failed"):
        return None, None  # the supervisor finished and said so: history, not a stale file
    why = (f"stale state file: supervisor pid {data.get('supervisor_pid')} is gone"
           if create_time(data.get("supervisor_pid") or -1) is None
           else f"stale state file: pid {data.get('supervisor_pid')} now belongs to another process")
    if cleanup:
        try:
            os.replace(path, path.with_suffix(".json.stale"))
        except OSError:
            pass
    return None, why
