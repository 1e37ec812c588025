"""Stack dumps of the server's processes, for a start that hangs (backend/server/watchdog.py says when).

py-spy (`pip install 'qwen-tui[debug]'`; it ships as a wheel) reads every thread's Python stack from
outside the process, without stopping or changing it. Without py-spy, what the kernel says of each
thread (state and the kernel function it waits in) is kept instead, with how to get more. vLLM's own
watchdog (`--watchdog-config`, vLLM 0.33) dumps from inside; the 0.32 CPU build here has none.

A dump is saved as JSON under the state dir (`stacks/`, the newest KEEP kept); `qwen-tui report`
includes the newest one of the current launch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from backend import paths

KEEP = 10
TIMEOUT_S = 30.0


def stacks_dir() -> Path:
    return paths.state_dir() / "stacks"


def py_spy() -> str | None:
    """py-spy beside this interpreter (a venv's bin is not always on PATH), else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which("py-spy")


def _comm(pid: int | str, tid: int | str | None = None) -> str:
    path = f"/proc/{pid}/task/{tid}/comm" if tid is not None else f"/proc/{pid}/comm"
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "?"


def kernel_view(pid: int) -> str:
    """Each thread's name, state and kernel wait channel, from /proc (no Python frames)."""
    lines = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as e:
        return f"cannot read /proc/{pid}/task: {e.strerror}"
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            state = stat.rsplit(")", 1)[1].split()[0]
            wchan = Path(f"/proc/{pid}/task/{tid}/wchan").read_text().strip() or "-"
        except (OSError, IndexError):
            continue
        lines.append(f"thread {tid} ({_comm(pid, tid)}): state {state}, waiting in {wchan}")
    return "\n".join(lines)


def dump_one(pid: int, tool: str | None, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    out: dict[str, Any] = {"pid": pid, "name": _comm(pid), "text": "", "error": None}
    if tool:
        try:
            r = subprocess.run([tool, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            r = None
            out["error"] = f"py-spy gave no dump within {timeout:.0f} s"
        except OSError as e:
            r = None
            out["error"] = f"py-spy could not run: {e}"
        if r is not None and r.returncode == 0 and r.stdout.strip():
            out["text"] = r.stdout.rstrip()
            return out
        if r is not None:
            first = (r.stderr or r.stdout).strip().splitlines()
            out["error"] = f"py-spy: {first[0] if first else f'exit code {r.returncode}'}"
    out["text"] = kernel_view(pid)
    return out


def dump(pids: list[int], log_path: str | None = None, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """Every pid's stacks: {"at", "tool", "log_path", "processes": [{"pid", "name", "text", "error"}]}."""
    tool = py_spy()
    version = None
    if tool:
        try:
            version = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            version = "py-spy"
    return {"at": time.time(), "tool": version or "kernel view (/proc): py-spy is not installed "
                                                  "(pip install 'qwen-tui[debug]' for Python stacks)",
            "log_path": log_path, "processes": [dump_one(p, tool, timeout) for p in pids]}


def server_pids(state: dict[str, Any]) -> list[int]:
    """The supervised server's processes: its process group (API server, engine, workers)."""
    from backend.server import procs  # psutil: only when a dump is asked for

    pgid = state.get("pgid")
    return sorted(procs.group_members(pgid)) if pgid else []


def save(d: dict[str, Any], folder: Path | None = None) -> Path:
    folder = folder or stacks_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"stacks-{time.strftime('%Y%m%d-%H%M%S', time.localtime(d['at']))}-{os.getpid()}.json"
    path.write_text(json.dumps(d, indent=1), encoding="utf-8")
    for old in sorted(folder.glob("stacks-*.json"))[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def latest(log_path: str | None = None, folder: Path | None = None) -> dict[str, Any] | None:
    """The newest saved dump (of the launch that writes `log_path`, when given)."""
    for path in sorted((folder or stacks_dir()).glob("stacks-*.json"), reverse=True):
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and (log_path is None or d.get("log_path") == log_path):
            return {**d, "path": str(path)}
    return None


def format_text(d: dict[str, Any]) -> str:
    head = f"stacks of {len(d['processes'])} process(es), {time.strftime('%H:%M:%S', time.localtime(d['at']))}, " \
           f"by {d['tool']}"
    parts = [head]
    for p in d["processes"]:
        parts.append(f"--- pid {p['pid']} ({p['name']})" + (f": {p['error']}" if p.get("error") else ""))
        parts.append(p["text"] or "(nothing)")
    return "\n".join(parts) + "\n"
